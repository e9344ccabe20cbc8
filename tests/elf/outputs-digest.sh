#!/usr/bin/env bash
# outputs-digest.sh KPACK [WHEEL...]
#
# Every output kpack writes for the fixtures, as one line per file:
# `sha256 mode path` (paths relative to the run's work directory, sorted),
# plus one `rc` line per command (a refusal is an output too). Run it with
# two kpack binaries and diff the listings: a refactor that claims
# byte-identical outputs must give the same listing.
#
#   split          each fixture fat binary (ELF, `ar`, PE, COFF, import
#                  library) in an artifact of its own, `--compression zstd`
#                  and `none`
#   reassemble     every file of each split's generic artifact, from its
#                  `.kpack` files (zstd and none)
#   recombine      the three fixture shards split with `--batch-artifact-
#                  parent-dir` (rocblas, hipblaslt, aotriton databases),
#                  recombined with packaging-config.json
#   split-wheel    a Linux and a Windows wheel made here (deterministic zip)
#                  of the fixture binaries, plus every WHEEL given
#                  (e.g. target/rocpack-pypi-cache/*.whl)
#
# Inputs: $ROCPACK_SHARED/fixtures (required) and $ROCPACK_WIN_FIXTURES
# (optional: skipped, with a note on stderr, when unset or missing).
# Needs python3 (zipfile) and sha256sum. Nothing is written outside a
# temporary directory, removed on exit.
set -euo pipefail
export LC_ALL=C TZ=UTC SOURCE_DATE_EPOCH=315532800

[ $# -ge 1 ] || { echo "usage: $0 KPACK [WHEEL...]" >&2; exit 2; }
KPACK="$(realpath "$1")"
shift
FX="${ROCPACK_SHARED:?set ROCPACK_SHARED to the directory holding fixtures/}/fixtures"
[ -d "$FX/fatbins" ] || { echo "$FX/fatbins: missing" >&2; exit 2; }
WIN="${ROCPACK_WIN_FIXTURES:-}"
W="$(mktemp -d "${TMPDIR:-/tmp}/outputs-digest.XXXXXX")"
trap 'rm -rf "$W"' EXIT
RC="$W/rc.txt"
: >"$RC"

# run NAME CMD...: runs CMD (stdout and stderr dropped), records its exit code.
run() {
    local name="$1"
    shift
    local rc=0
    "$@" >/dev/null 2>"$W/last.err" || rc=$?
    printf 'rc %s %s\n' "$rc" "$name" >>"$RC"
    if [ "${OUTPUTS_DIGEST_VERBOSE:-0}" = 1 ] && [ "$rc" != 0 ]; then
        sed "s|^|$name: |" "$W/last.err" >&2
    fi
}

# split_one KIND FILE: an artifact holding FILE under lib/, split both ways;
# every file of the generic artifact reassembled from each split.
split_one() {
    local kind="$1" f="$2" base
    base="$kind-$(basename "$f")"
    local art="$W/in/$base"
    mkdir -p "$art/lib"
    cp "$f" "$art/lib/"
    echo lib >"$art/artifact_manifest.txt"
    for c in zstd none; do
        local out="$W/out/split-$c/$base"
        run "split $c $base" "$KPACK" split --artifact-dir "$art" --artifact-prefix fx \
            --output-dir "$out" --compression "$c"
        [ -d "$out/fx_generic" ] || continue
        while IFS= read -r -d '' h; do
            local rel="${h#"$out"/fx_generic/}"
            local dst="$W/out/reassemble-$c/$base/$rel"
            mkdir -p "$(dirname "$dst")"
            run "reassemble $c $base/$rel" "$KPACK" reassemble --host "$h" --kpack-dir "$out" --output "$dst"
        done < <(find "$out/fx_generic" -type f ! -name artifact_manifest.txt -print0 | sort -z)
    done
}

for f in "$FX"/fatbins/*; do
    split_one linux "$f"
done
if [ -n "$WIN" ] && [ -d "$WIN/fatbins-win" ]; then
    for f in "$WIN"/fatbins-win/*; do
        split_one win "$f"
    done
else
    echo "outputs-digest: no Windows fixtures (ROCPACK_WIN_FIXTURES): skipped" >&2
fi

# recombine: the fixture shards split as CI shards, then recombined.
for s in "$FX"/artifacts/*-build; do
    run "split-batch $(basename "$s")" "$KPACK" split --batch-artifact-parent-dir "$s" \
        --output-dir "$W/out/shards/$(basename "$s")" --split-databases rocblas hipblaslt aotriton
done
run recombine "$KPACK" recombine --input-shards-dir "$W/out/shards" \
    --config "$FX/artifacts/packaging-config.json" --output-dir "$W/out/recombined"

# split-wheel: wheels made here (fixed timestamps and modes), then the given ones.
python3 - "$W/wheels" "$FX/fatbins" "${WIN:-}" <<'EOF'
import base64, hashlib, os, sys, zipfile

out, linux, win = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(out, exist_ok=True)

def wheel(name, tag, files):
    dist = "%s-1.0.dist-info" % name
    entries = [("%s/%s" % (name, os.path.basename(f)), open(f, "rb").read()) for f in sorted(files)]
    entries.append(("%s/__init__.py" % name, b""))
    entries.append(("%s/METADATA" % dist, b"Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % name.encode()))
    entries.append(("%s/WHEEL" % dist,
                    b"Wheel-Version: 1.0\nGenerator: outputs-digest\nRoot-Is-Purelib: false\nTag: %s\n" % tag.encode()))
    record = "".join("%s,sha256=%s,%d\n" % (n, base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode(), len(d))
                     for n, d in entries) + "%s/RECORD,,\n" % dist
    entries.append(("%s/RECORD" % dist, record.encode()))
    path = os.path.join(out, "%s-1.0-%s.whl" % (name, tag))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in entries:
            i = zipfile.ZipInfo(n, (1980, 1, 1, 0, 0, 0))
            i.external_attr = 0o644 << 16
            i.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(i, d)

so = [os.path.join(linux, f) for f in os.listdir(linux) if f.endswith((".so", ".a"))]
wheel("fxwheel", "cp312-cp312-manylinux_2_28_x86_64", so)
if win and os.path.isdir(os.path.join(win, "fatbins-win")):
    d = os.path.join(win, "fatbins-win")
    dlls = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".dll") and f != "amdhip64.dll"]
    wheel("fxwin", "cp312-cp312-win_amd64", dlls)
EOF
for whl in "$W"/wheels/*.whl "$@"; do
    b="$(basename "$whl")"
    for c in zstd none; do
        run "split-wheel $c $b" "$KPACK" split-wheel "$whl" --output-dir "$W/out/split-wheel-$c/$b" --compression "$c"
    done
done

cd "$W/out"
find . -type l -printf 'link %l %P\n' | sort
find . -type f -print0 | sort -z | while IFS= read -r -d '' f; do
    printf '%s %s %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$(stat -c %a "$f")" "${f#./}"
done
sort "$RC"
