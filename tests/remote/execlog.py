#!/usr/bin/env python3
"""Checks a Bazel --execution_log_json_file (tests/ci/65-remote.sh, bench/remote.sh).

    execlog.py LOG summary
        one line per (mnemonic, runner) with its count, then totals.
    execlog.py LOG remote [--local-ok MNEMONIC=REASON ...]
        exit 1 unless every spawn ran remotely (runner "remote") or was a
        remote cache hit; a spawn whose mnemonic is listed may run locally
        (the reason is printed with it); MNEMONIC:TEXT allows only the spawns
        of that mnemonic one of whose outputs contains TEXT.
    execlog.py LOG hits [--local-ok MNEMONIC[:TEXT]=REASON ...]
        exit 1 unless there are spawns and every one is a remote cache hit
        (or allowed to run locally, as for `remote`).
    execlog.py LOG helper-inputs NAME=SHA256 ... [--mnemonics M,M,...]
        exit 1 unless every spawn of the given mnemonics has an input whose
        path ends in /NAME with exactly that sha256 (the helper is part of
        every action key), for at least one of the NAMEs.
    execlog.py LOG outputs
        print the outputs' paths (one per line).

Bazel 4.2 writes the log as concatenated, pretty-printed JSON objects; 7.x
writes one object per line. Both are read with raw_decode.
"""
import json
import sys


def spawns(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    dec = json.JSONDecoder()
    i, n, out = 0, len(text), []
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return out
        obj, i = dec.raw_decode(text, i)
        out.append(obj)


def runner(s):
    if s.get("remoteCacheHit"):
        return "remote cache hit"
    return s.get("runner", "?")


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    log, cmd, rest = argv[1], argv[2], argv[3:]
    ss = spawns(log)
    if cmd == "summary":
        counts = {}
        for s in ss:
            k = (s.get("mnemonic", "?"), runner(s))
            counts[k] = counts.get(k, 0) + 1
        for (m, r), c in sorted(counts.items()):
            print(f"{c:5d}  {m:24s} {r}")
        by_runner = {}
        for s in ss:
            by_runner[runner(s)] = by_runner.get(runner(s), 0) + 1
        print("total %d spawns: %s" % (len(ss), ", ".join(f"{v} {k}" for k, v in sorted(by_runner.items()))))
        return 0
    if cmd == "remote":
        ok = {}
        it = iter(rest)
        for a in it:
            if a == "--local-ok":
                m, _, reason = next(it).partition("=")
                ok[m] = reason
            else:
                print(f"execlog.py: unknown argument {a}", file=sys.stderr)
                return 2
        bad = []
        for s in ss:
            r = runner(s)
            if r in ("remote", "remote cache hit"):
                continue
            m = s.get("mnemonic", "?")
            outs = " ".join(s.get("listedOutputs", []))
            key = next((k for k in ok if k == m or (":" in k and k.split(":", 1)[0] == m and k.split(":", 1)[1] in outs)), None)
            if key is not None:
                print(f"  local by design: {key} ({ok[key]})")
                continue
            bad.append(f"{m} ran '{r}': {' '.join(s.get('commandArgs', []))[:200]}")
        for b in bad:
            print("  NOT REMOTE: " + b, file=sys.stderr)
        if not ss:
            print("  no spawns in the log", file=sys.stderr)
        return 1 if bad or not ss else 0
    if cmd == "hits":
        ok = [next(iter(rest[i + 1:i + 2]), "").partition("=")[0] for i, a in enumerate(rest) if a == "--local-ok"]
        def allowed(s):
            m, outs = s.get("mnemonic", "?"), " ".join(s.get("listedOutputs", []))
            return any(k == m or (":" in k and k.split(":", 1)[0] == m and k.split(":", 1)[1] in outs) for k in ok)
        for s in ss:
            if runner(s) != "remote cache hit" and allowed(s):
                print(f"  local by design, not cached: {s.get('mnemonic')} {' '.join(s.get('listedOutputs', []))[:120]}")
        bad = [s for s in ss if runner(s) != "remote cache hit" and not allowed(s)]
        for s in bad:
            print(f"  not a cache hit: {s.get('mnemonic')} ({runner(s)})", file=sys.stderr)
        return 1 if bad or not ss else 0
    if cmd == "helper-inputs":
        want, mnemonics = {}, None
        it = iter(rest)
        for a in it:
            if a == "--mnemonics":
                mnemonics = set(next(it).split(","))
            else:
                name, _, sha = a.partition("=")
                want[name] = sha
        checked, bad = 0, []
        for s in ss:
            m = s.get("mnemonic", "?")
            if mnemonics is not None and m not in mnemonics:
                continue
            if mnemonics is None and not any(
                    a.endswith("/" + n) or a == n for a in s.get("commandArgs", []) for n in want):
                continue
            checked += 1
            found = False
            for inp in s.get("inputs", []):
                p = inp.get("path", "")
                for name, sha in want.items():
                    if p.endswith("/" + name) and inp.get("digest", {}).get("hash") == sha:
                        found = True
            if not found:
                bad.append(m)
        for m in bad:
            print(f"  {m}: no helper input with the pinned digest", file=sys.stderr)
        print(f"  {checked - len(bad)} of {checked} helper actions carry the helper's digest among their inputs")
        return 1 if bad or checked == 0 else 0
    if cmd == "outputs":
        for s in ss:
            for o in s.get("actualOutputs", []):
                print(o.get("path", ""))
        return 0
    print(f"execlog.py: unknown command {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
