#!/bin/bash
# Runs one rocpack helper on a staged copy of its inputs. Used by every rule
# action in rules/bazel/private (never by users directly).
#
# Inputs in a Bazel sandbox are symlinks into the execroot, and without a
# sandbox a source directory shows everything in it. The helpers must see
# exactly the declared files, so they are staged into a fresh directory
# first: copied (symlinks dereferenced), or, with --link-inputs (kpack split
# and recombine), linked. Never hard-linked: a hard link changes the
# source's ctime, and Bazel then digests the whole input again on the next
# build (measured: a 1.3 GB input re-hashed after every split).
#
# stage.sh [options] -- TOOL ARGS...
#   --stage LIST          LIST holds "dest<TAB>src" lines: src (a file, or a
#                         directory copied recursively) is copied to
#                         $STAGE/dest. The token @STAGE@ in ARGS is replaced.
#   --tmp-out             ARGS token @OUT@ becomes a fresh path (not yet created,
#                         so tools that insist on a new output dir accept it).
#   --collect SUB DEST    after TOOL: move @OUT@/SUB/* into directory DEST
#                         (@OUT@ is made beside DEST, so each is a rename);
#                         fails when SUB does not exist (lists what does).
#                         Repeatable: one helper run fills several outputs
#                         (kpack_packages: every group of one recombine).
#   --collect-message FMT the error when a --collect SUB is missing: a printf
#                         format with two %s, the missing SUBs and what the
#                         helper wrote (rules/common/kpack.bzl's
#                         kpack_missing_package_format).
#   --collect-all DEST    after TOOL: move @OUT@/* into directory DEST.
#   --kpack-dirs SCRIPT   the text of rules/common/kpack.bzl's KPACK_DIRS_SCRIPT
#                         (the Buck2 rules run the same text): --archs and
#                         --links run it with /bin/sh.
#   --archs FILE PREFIX EXPECT  after TOOL: write the archs of the split in
#                         @OUT@ (its PREFIX_<arch> subdirectories) to FILE
#                         and, when EXPECT is not empty, fail unless they
#                         are exactly EXPECT (KPACK_DIRS_SCRIPT's `archs`).
#   --sha256 HEX FILE     fail unless FILE's sha256 is HEX (before TOOL).
#   --link-inputs         stage each input file as an absolute symlink to the
#                         file it really is (no bytes copied), and replace the
#                         ARGS token @STAGING_ROOTS@ with `--staging-root R`
#                         for each directory R those files lie in at their
#                         staged relative path: kpack reads such a link as the
#                         input it stands for and judges the input's own
#                         symlinks as in the original tree (the policy the
#                         Buck2 rules use with symlinked_dir). A directory is
#                         one link to where it really is (a root itself). A
#                         file whose real path does not end in its staged
#                         path is copied.
#   --links LIST          LIST holds "dest<TAB>target" lines: $STAGE/dest
#                         becomes a symlink with exactly that target text
#                         (kpack_split's `symlinks`, made by KPACK_DIRS_SCRIPT's
#                         `links`; with --link-inputs in a directory of its
#                         own, one more root).
#
# A listed file that is a relative symlink in the source tree (an artifact's
# librocblas.so.5 -> librocblas.so.5.2) is staged as the file it points to:
# Bazel digests a source symlink as its target, so that it is a link is in
# no action key, and a remote worker only ever gets a regular file. Staging
# it as a link here would make local and remote outputs differ under one
# key. Such links are declared instead (--links); an undeclared one gets a
# note (only a local run can see it).
set -euo pipefail
export LC_ALL=C
stage_list="" links_list="" tmp_out=0 collect_subs=() collect_dests=() collect_all="" archs_file="" archs_prefix="" archs_expect=""
collect_message='rocpack: no package %s (check the `group` / `groups` attribute against the packaging config). The helper wrote: %s\n'
kpack_dirs="" link_inputs=0
roots=()
sha_hex="" sha_file=""
while [ $# -gt 0 ]; do
    case "$1" in
        --stage) stage_list="$2"; shift 2 ;;
        --links) links_list="$2"; shift 2 ;;
        --tmp-out) tmp_out=1; shift ;;
        --collect) collect_subs+=("$2"); collect_dests+=("$3"); tmp_out=1; shift 3 ;;
        --collect-message) collect_message="$2"; shift 2 ;;
        --collect-all) collect_all="$2"; tmp_out=1; shift 2 ;;
        --kpack-dirs) kpack_dirs="$2"; shift 2 ;;
        --archs) archs_file="$2"; archs_prefix="$3"; archs_expect="$4"; shift 4 ;;
        --sha256) sha_hex="$2"; sha_file="$3"; shift 3 ;;
        --link-inputs) link_inputs=1; shift ;;
        --) shift; break ;;
        *) echo "stage.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
work="$(mktemp -d "${TMPDIR:-/tmp}/rocpack.XXXXXXXX")"
# Collected outputs are moved, not copied: the helper writes beside the
# declared output (same file system), and each entry is renamed into it.
outdir="$work"
dest="${collect_all:-${collect_dests[0]:-}}"
if [ -n "$dest" ]; then
    outdir="$(mktemp -d "$(dirname "$dest")/.rocpack-out.XXXXXXXX")"
fi
trap 'find "$work" "$outdir" -type d -exec chmod u+w {} + 2>/dev/null; rm -rf "$work" "$outdir"' EXIT
stage="$work/stage"
out="$outdir/out"
mkdir -p "$stage"

if [ -n "$sha_hex" ]; then
    actual="$(sha256sum < "$sha_file" | cut -d' ' -f1)"
    if [ "$actual" != "$sha_hex" ]; then
        echo "rocpack: sha256 mismatch for $sha_file: expected $sha_hex, got $actual" >&2
        exit 1
    fi
fi

# stage_one SRC DEST: Bazel hands sources in through absolute links
# (execroot, sandbox). Follow those; the first relative link on the way is
# the artifact's own symlink (librocblas.so.5 -> librocblas.so.5.2) and is
# staged as that link, as `kpack` sees it in the original tree (the helper
# judges where it points). Anything else is copied, or with --link-inputs
# linked (REL: its path below the staging root kpack will see).
add_root() {
    local r
    for r in "${roots[@]}"; do [ "$r" = "$1" ] && return 0; done
    roots+=("$1")
}
# last_hop P: follow P's absolute links (sandbox, execroot) and print where
# they end: the file, or the first relative link met (the artifact's own
# symlink, librocblas.so.5 -> librocblas.so.5.2).
last_hop() {
    local l="$1" hops=0 t
    while [ -L "$l" ] && [ $hops -lt 40 ]; do
        t="$(readlink "$l")"
        case "$t" in /*) l="$t" ;; *) break ;; esac
        hops=$((hops + 1))
    done
    printf '%s\n' "$l"
}
# own_location P: where P's last hop physically is (its directory resolved).
own_location() {
    local l
    l="$(last_hop "$1")"
    printf '%s/%s\n' "$(readlink -f -- "$(dirname -- "$l")")" "$(basename -- "$l")"
}
# tree_root DIR: the directory DIR really is when every entry below it (seen
# through the sandbox's links) lies at its own relative path below one
# place, e.g. a tree artifact in the execroot; nothing when not.
tree_root() {
    local src="$1" root="" e rel real r
    while IFS= read -r -d '' e; do
        rel="${e#"$src"/}"
        real="$(own_location "$e")"
        case "$real" in */"$rel") r="${real%/"$rel"}" ;; *) return 0 ;; esac
        if [ -z "$root" ]; then root="$r"; elif [ "$root" != "$r" ]; then return 0; fi
    done < <(find "$src" -mindepth 1 ! -type d -print0)
    [ -n "$root" ] && printf '%s\n' "$root"
    return 0
}
stage_one() {
    local own="" l real rel="${3:-}"
    l="$(last_hop "$1")"
    if [ -L "$l" ]; then
        case "$(readlink "$l")" in /*) ;; *) own="$(readlink "$l")" ;; esac
    fi
    if [ -n "$own" ] && [ "${4:-}" = content ]; then
        echo "rocpack: note: ${rel:-$2} is a symlink in the source tree (-> $own); it is packaged as the file it points to, as on a remote worker. Declare it in kpack_split's \`symlinks\` to keep it a link." >&2
        own=""
        l="$(readlink -f -- "$l")"
    fi
    mkdir -p "$(dirname "$2")"
    if [ "$link_inputs" = 1 ] && [ -n "$rel" ] && { [ -n "$own" ] || [ -f "$l" ]; }; then
        if [ -n "$own" ]; then
            # The artifact's own symlink, where it really is: kpack judges
            # it there, in the original tree.
            real="$(own_location "$l")"
        else
            real="$(readlink -f -- "$l")"
        fi
        case "$real" in
            */"$rel")
                add_root "${real%/"$rel"}"
                ln -s "$real" "$2"
                return 0 ;;
        esac
    fi
    if [ -n "$own" ]; then
        ln -s "$own" "$2"
    else
        cp -L "$1" "$2"
    fi
}

if [ -n "$stage_list" ]; then
    while IFS=$'\t' read -r dest src; do
        [ -n "$dest" ] || continue
        real=""
        if [ -d "$src" ] && [ "$link_inputs" = 1 ]; then
            real="$(tree_root "$src")"
        fi
        if [ -n "$real" ]; then
            # A directory input (a tree artifact: split outputs handed to
            # recombine) is one link to where it really is, and a root.
            mkdir -p "$(dirname "$stage/$dest")"
            ln -s "$real" "$stage/$dest"
            add_root "$real"
        elif [ -d "$src" ]; then
            mkdir -p "$stage/$dest"
            while IFS= read -r -d '' e; do
                rel="${e#"$src"/}"
                if [ -d "$e" ] && ! { [ -L "$e" ] && case "$(readlink "$e")" in /*) false ;; *) true ;; esac; }; then
                    mkdir -p "$stage/$dest/$rel"
                else
                    stage_one "$e" "$stage/$dest/$rel" "$rel"
                fi
            done < <(find -L "$src" -mindepth 1 -print0 | sort -z)
        else
            # Below the staged directory's first component (@STAGE@/a for
            # kpack split) the path is the input's own.
            case "$dest" in */*) rel="${dest#*/}" ;; *) rel="" ;; esac
            stage_one "$src" "$stage/$dest" "$rel" content
        fi
    done < "$stage_list"
    find "$stage" -type d -exec chmod u+w {} +
fi

if [ -n "$links_list" ]; then
    links_root="$work/links"
    links=()
    while IFS=$'\t' read -r dest target; do
        [ -n "$dest" ] || continue
        case "$dest" in */*) rel="${dest#*/}" ;; *) rel="$dest" ;; esac
        if [ -e "$stage/$dest" ] || [ -L "$stage/$dest" ]; then
            echo "rocpack: $dest is both an input and a declared symlink" >&2
            exit 2
        fi
        mkdir -p "$(dirname "$stage/$dest")"
        if [ "$link_inputs" = 1 ]; then
            # The link in a tree of its own (a staging root), the stage
            # pointing at it like at any other input: kpack judges it there.
            links+=("$rel" "$target")
            ln -s "$links_root/$rel" "$stage/$dest"
        else
            links+=("$dest" "$target")
        fi
    done < "$links_list"
    if [ ${#links[@]} -gt 0 ]; then
        if [ "$link_inputs" = 1 ]; then
            /bin/sh -c "$kpack_dirs" kpack_dirs links "$links_root" "${links[@]}"
            add_root "$links_root"
        else
            /bin/sh -c "$kpack_dirs" kpack_dirs links "$stage" "${links[@]}"
        fi
    fi
fi

cmd=()
for a in "$@"; do
    if [ "$a" = "@STAGING_ROOTS@" ]; then
        for r in "${roots[@]}"; do cmd+=(--staging-root "$r"); done
        continue
    fi
    a="${a//@STAGE@/$stage}"
    a="${a//@OUT@/$out}"
    cmd+=("$a")
done
# The helper's report is noise in a build log (and `bazel run` would mix it
# into the program's output): keep it, show it only when the helper fails.
if [ ${#cmd[@]} -gt 0 ]; then
    rc=0
    "${cmd[@]}" > "$work/tool.log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
        cat "$work/tool.log" >&2
        exit "$rc"
    fi
fi

subdirs() { [ -d "$out" ] || return 0; (cd "$out" && find . -mindepth 1 -maxdepth 1 -type d | sed 's|^\./||' | sort); }
if [ -n "$archs_file" ]; then
    /bin/sh -c "$kpack_dirs" kpack_dirs archs "$out" "$archs_prefix" "$archs_expect" "$archs_file"
fi
missing=()
for sub in "${collect_subs[@]}"; do
    [ -d "$out/$sub" ] || missing+=("$sub")
done
if [ ${#missing[@]} -gt 0 ]; then
    # kpack recombine writes <component>_<group> for each group of the
    # config that has content in the shards (and <component>_generic).
    # shellcheck disable=SC2059 # the format is the caller's message
    printf "$collect_message" "${missing[*]}" "$(subdirs | tr '\n' ' ' | sed 's/ $//')" >&2
    exit 1
fi
for i in "${!collect_subs[@]}"; do
    mkdir -p "${collect_dests[$i]}"
    find "$out/${collect_subs[$i]}" -mindepth 1 -maxdepth 1 -exec mv -t "${collect_dests[$i]}" {} +
done
if [ -n "$collect_all" ]; then
    [ -d "$out" ] || { echo "rocpack: the helper wrote no output directory" >&2; exit 1; }
    mkdir -p "$collect_all"
    find "$out" -mindepth 1 -maxdepth 1 -exec mv -t "$collect_all" {} +
fi
