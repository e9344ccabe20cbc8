# Shared by tests/bazel/abi-recovery.sh and tests/buck2/abi-recovery.sh
# (source it from the consumer's root, after defining die): what a re-cut of
# the guarded `mylib` snapshot at ROCm 6.4 must keep and record, whatever the
# build system.

# kept CHANNEL_DIR: the snapshot's headers and commits as recorded, and its
# header file.
kept() {
    sed -n '/^Headers:/,/^$/p;/^Commit Hashes:/,/^$/p' "libs/mylib/snapshots/$1/6.4/metadata.txt"
    sha256sum "libs/mylib/snapshots/$1/6.4/mylib.h"
}

# recut_kept STABLE_KEPT LAST_KEPT: after the printed re-cuts, both channels
# hold the headers and commits they had (as `kept` printed them before),
# record the changed libs/dep/dep.h, and the replaced metadata is archived.
recut_kept() {
    kept stable | diff "$1" - >&2 || die "stable lost headers or commits"
    kept last-stable | diff "$2" - >&2 || die "last-stable lost headers or commits"
    local new d
    new="$(sha256sum libs/dep/dep.h | cut -d' ' -f1)"
    for d in stable last-stable; do
        grep -q "libs/dep/dep.h: $new" "libs/mylib/snapshots/$d/6.4/metadata.txt" || die "$d does not record the new dep.h"
    done
    ls libs/mylib/snapshots/archives/6.4/ | grep -q '_metadata.txt$' || die "no archived metadata"
}
