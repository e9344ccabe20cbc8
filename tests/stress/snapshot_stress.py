#!/usr/bin/env python3
"""Fault-and-race stress of snapctl (driven by tests/stress/snapshot.sh).

Runs the real binary with the real clock (SOURCE_DATE_EPOCH is removed from
the environment) and checks every result with oracles of its own (hashlib,
its own walk of the tree), not with snapctl's opinion alone:

  concurrent  ROUNDS rounds of PROCS processes creating the same ROCm version
              at once; afterwards every snapshot must be reachable exactly
              once (stable + last-stable + archives == number of creates).
  kill        ITERS create/rollback runs killed with SIGKILL at a random
              moment, each followed by a random next command (recover, a
              reader, another create); invariants checked after every one.
  enospc      creates into a root on a tiny tmpfs with the free space moved
              across every point of the transaction (needs root: mount).
  s3          creates into moto's S3 server while another thread rewrites
              the artifact in place (each refused or a whole version
              published); a poisoned object is replaced.

Each part prints one summary line with its counts; any broken invariant
stops the run with exit 1 and names the iteration.
"""

import argparse
import hashlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HEX64 = re.compile(r"^[0-9a-f]{64}$")
SNAPCTL = None


class Broken(Exception):
    pass


def env():
    e = dict(os.environ)
    for k in ("SOURCE_DATE_EPOCH", "SNAPCTL_FAIL_AT", "SNAPCTL_TRACE_STEPS"):
        e.pop(k, None)
    return e


def run(args, cwd, check=True, extra=None):
    e = env()
    if extra:
        e.update(extra)
    p = subprocess.run([SNAPCTL] + args, cwd=cwd, env=e, capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise Broken(f"snapctl {' '.join(args)} exited {p.returncode}\n{p.stdout}{p.stderr}")
    return p


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def parse_meta(path):
    """(sha256, commit, headers{name: sha}) of a metadata.txt, by our own reading."""
    sha, commit, headers, section = None, None, {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if s.endswith(":") and ":" not in s[:-1]:
                section = s[:-1]
                continue
            if ":" not in s:
                continue
            k, v = (x.strip() for x in s.split(":", 1))
            if section == "Checksums" and k == "sha256":
                sha = v
            elif section == "Commit Hashes" and k == "rcclx":
                commit = v
            elif section == "Headers":
                headers[k] = v
    return sha, commit, headers


def metadata_files(root):
    """Every metadata file that makes a snapshot reachable: (where, path, headers dir or None)."""
    out = []
    for ch in ("stable", "last-stable"):
        d = os.path.join(root, ch)
        if os.path.isdir(d):
            for ver in sorted(os.listdir(d)):
                m = os.path.join(d, ver, "metadata.txt")
                if os.path.exists(m):
                    out.append((f"{ch}/{ver}", m, os.path.join(d, ver)))
    a = os.path.join(root, "archives")
    if os.path.isdir(a):
        for ver in sorted(os.listdir(a)):
            for f in sorted(os.listdir(os.path.join(a, ver))):
                if f.endswith("_metadata.txt"):
                    out.append((f"archives/{ver}/{f}", os.path.join(a, ver, f), None))
    return out


class Oracle:
    """Independent checks of a snapshots root with a local store at root/store."""

    def __init__(self, root):
        self.root = root
        self.good_blobs = {}  # sha -> (ino, size, mtime) seen hashing right

    def reachable(self):
        """commit -> where; raises if a commit is reachable twice."""
        seen = {}
        for where, m, _ in metadata_files(self.root):
            _, commit, _ = parse_meta(m)
            if commit is None:
                raise Broken(f"{where}: no rcclx commit")
            if commit in seen:
                raise Broken(f"commit {commit} reachable twice: {seen[commit]} and {where}")
            seen[commit] = where
        return seen

    def blobs_and_headers(self):
        cas = os.path.join(self.root, "store", "cas", "sha256")
        for where, m, hdir in metadata_files(self.root):
            sha, _, headers = parse_meta(m)
            p = os.path.join(cas, sha)
            if not os.path.isfile(p):
                raise Broken(f"{where}: blob {sha} missing from the store")
            st = os.stat(p)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self.good_blobs.get(sha) != key:
                got = sha256(p)
                if got != sha:
                    raise Broken(f"{where}: blob {sha} holds bytes hashing to {got}")
                self.good_blobs[sha] = key
            if hdir:
                for h, want in headers.items():
                    hp = os.path.join(hdir, h)
                    if not os.path.isfile(hp) or sha256(hp) != want:
                        raise Broken(f"{where}: header {h} missing or changed")

    def all_blobs_hash_to_names(self):
        cas = os.path.join(self.root, "store", "cas", "sha256")
        if os.path.isdir(cas):
            for n in os.listdir(cas):
                if HEX64.match(n) and sha256(os.path.join(cas, n)) != n:
                    raise Broken(f"store object {n} does not hash to its name")

    def no_temp_files(self):
        cas = os.path.join(self.root, "store", "cas", "sha256")
        if os.path.isdir(cas):
            bad = [n for n in os.listdir(cas) if not HEX64.match(n)]
            if bad:
                raise Broken(f"temp files left in the store: {bad}")
        pdir = os.path.join(self.root, ".snapctl")
        if os.path.isdir(pdir):
            for n in os.listdir(pdir):
                if n in ("lock", ".gitignore"):
                    continue
                if n == "staging" and not os.listdir(os.path.join(pdir, n)):
                    continue
                raise Broken(f"left in .snapctl/: {n}")
        for d, _, files in os.walk(self.root):
            for f in files:
                if ".tmp" in f or ".part" in f:
                    raise Broken(f"temp file left: {os.path.join(d, f)}")

    def snapctl_agrees(self, cwd):
        run(["verify", "--snapshots-root", self.root, "--all"], cwd)
        run(["check", "--snapshots-root", self.root, "--checksums",
             os.path.join(self.root, "stable_checksums.bzl")], cwd)


def write_artifact(d, name, size, rng):
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, name)
    with open(p, "wb") as f:
        f.write(rng.randbytes(size))
    return p


def create_args(root, ver, art, header, commit):
    return ["create", "--snapshots-root", root, "--version", ver, "--artifact", art,
            "--header", header, "--commit", f"rcclx={commit:040x}"]


# --------------------------------------------------------------------------
def concurrent(work, rounds, procs, rng):
    root = os.path.join(work, "conc", "root")
    art = os.path.join(work, "conc", "art")
    os.makedirs(root)
    # A small pool of artifacts: racing creates also race on put-if-absent.
    pool = []
    for i in range(6):
        d = os.path.join(art, f"a{i}")
        a = write_artifact(d, "librcclx-dev.a", 20000 + 977 * i, rng)
        h = os.path.join(d, "rccl.h")
        with open(h, "w") as f:
            f.write(f"/* build {i} */\n")
        pool.append((a, h))
    versions = ["6.4", "7.0"]
    created = {v: 0 for v in versions}
    commit = 0
    t0 = time.monotonic()
    for r in range(rounds):
        ver = versions[r % len(versions)]
        children = []
        for _ in range(procs):
            commit += 1
            a, h = rng.choice(pool)
            children.append(subprocess.Popen(
                [SNAPCTL] + create_args(root, ver, a, h, commit), env=env(),
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        for c in children:
            _, err = c.communicate(timeout=120)
            if c.returncode != 0:
                raise Broken(f"concurrent round {r}: create exited {c.returncode}: {err}")
            created[ver] += 1
    elapsed = time.monotonic() - t0
    o = Oracle(root)
    reach = o.reachable()
    want = {f"{i:040x}" for i in range(1, commit + 1)}
    lost = sorted(want - set(reach))
    if lost:
        raise Broken(f"concurrent: {len(lost)} of {commit} snapshots lost: {lost[:5]}")
    per = {v: sum(1 for w in reach.values() if w.split("/")[1] == v) for v in versions}
    for v in versions:
        if per[v] != created[v]:
            raise Broken(f"concurrent: ROCm {v}: {created[v]} creates, {per[v]} reachable")
    o.blobs_and_headers()
    o.no_temp_files()
    o.snapctl_agrees(work)
    print(f"concurrent: {rounds} rounds x {procs} processes, {commit} snapshots created, "
          f"{len(reach)} reachable, {len(want - set(reach))} lost "
          f"({', '.join(f'{v}: {per[v]}' for v in versions)}); {elapsed:.1f} s", flush=True)
    return commit


# --------------------------------------------------------------------------
def last_step(stderr_text):
    steps = re.findall(r"snapctl-step \d+ (.*?) \[\+", stderr_text)
    return steps[-1] if steps else None


def phase_of(step):
    if step is None:
        return "before the first durable step"
    if step.startswith("upload"):
        return "upload"
    if step.startswith("stage"):
        return "staging"
    if "journal" in step:
        return "commit"
    return "apply"


def kill_loop(work, iters, rng):
    base = os.path.join(work, "kill")
    root = os.path.join(base, "root")
    art = os.path.join(base, "art")
    os.makedirs(root)
    o = Oracle(root)
    versions = ["6.4", "7.0"]
    commit = 0

    def new_create(ver):
        nonlocal commit
        commit += 1
        d = os.path.join(art, f"c{commit % 4}")
        a = write_artifact(d, "librcclx-dev.a", rng.randrange(4 << 10, 64 << 10), rng)
        h = os.path.join(d, "rccl.h")
        with open(h, "w") as f:
            f.write(f"/* build {commit} */\n")
        return create_args(root, ver, a, h, commit), f"{commit:040x}"

    for v in versions:
        for _ in range(2):
            args, _ = new_create(v)
            run(args, base)
    # Calibrate: how long an uninterrupted create and rollback take here.
    t = time.monotonic()
    for v in versions:
        args, _ = new_create(v)
        run(args, base)
    t_create = (time.monotonic() - t) / len(versions)
    t = time.monotonic()
    run(["rollback", "--snapshots-root", root, "--version", "6.4"], base)
    t_rollback = time.monotonic() - t
    args, _ = new_create("6.4")
    run(args, base)
    # How many durable steps a full rotation and a rollback have.
    nsteps = {}
    for op, a2 in (("create", new_create("7.0")[0]),
                   ("rollback", ["rollback", "--snapshots-root", root, "--version", "7.0"])):
        p = run(a2, base, extra={"SNAPCTL_TRACE_STEPS": "1"})
        nsteps[op] = len(re.findall(r"^snapctl-step ", p.stderr, re.M))
    args, _ = new_create("7.0")
    run(args, base)

    stats = {"create": 0, "rollback": 0, "finished before the kill": 0, "committed": 0,
             "rolled back": 0, "invariant checks": 0}
    phases = {}
    nexts = {}
    before = o.reachable()
    t0 = time.monotonic()
    it = 0
    killed = 0
    # Until `iters` runs were really killed mid-run (runs that finish before
    # their kill are checked the same way but not counted), at most 3x as many.
    while killed < iters and it < 3 * iters:
        it += 1
        ver = rng.choice(versions)
        has_last = os.path.exists(os.path.join(root, "last-stable", ver, "metadata.txt"))
        op = "rollback" if has_last and rng.random() < 0.3 else "create"
        new_commit = None
        if op == "create":
            args, new_commit = new_create(ver)
            dur = t_create
        else:
            args = ["rollback", "--snapshots-root", root, "--version", ver]
            dur = t_rollback
        stats[op] += 1
        e = env()
        e["SNAPCTL_TRACE_STEPS"] = "1"
        p = subprocess.Popen([SNAPCTL] + args, env=e, cwd=base, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        seen = []
        if rng.random() < 0.3:
            # A random moment in time.
            time.sleep(rng.uniform(0, 0.8 * dur))
        else:
            # A random durable step (uniform over the steps, which time is
            # not): kill once the k-th step is announced (30 %: 0-2 ms later).
            k = rng.randrange(1, nsteps[op])
            for line in p.stderr:
                seen.append(line)
                if line.startswith(f"snapctl-step {k} "):
                    if rng.random() < 0.3:
                        time.sleep(rng.uniform(0, 0.002))
                    break
        finished = p.poll() is not None
        if not finished:
            os.kill(p.pid, signal.SIGKILL)
            killed += 1
        _, err = p.communicate(timeout=60)
        err = "".join(seen) + err
        if finished:
            stats["finished before the kill"] += 1
            if p.returncode not in (0, 2):
                raise Broken(f"iteration {it}: {op} exited {p.returncode}: {err}")
        else:
            ph = f"{op}: {phase_of(last_step(err))}"
            phases[ph] = phases.get(ph, 0) + 1
        # The next command: recovery, a reader (which must roll a committed
        # transaction forward or ignore uncommitted staging), or a writer.
        nxt = rng.choice(["recover", "status", "verify", "create"])
        nexts[nxt] = nexts.get(nxt, 0) + 1
        next_commit = None
        if nxt == "recover":
            run(["recover", "--snapshots-root", root], base)
        elif nxt == "status":
            run(["status", "--snapshots-root", root, "--json"], base)
        elif nxt == "verify":
            run(["verify", "--snapshots-root", root, "--all"], base)
        else:
            a2, next_commit = new_create(rng.choice(versions))
            run(a2, base)
        after = o.reachable()
        missing = set(before) - set(after)
        if missing:
            raise Broken(f"iteration {it} ({op}, then {nxt}): snapshots lost: {sorted(missing)}")
        extra = set(after) - set(before) - {new_commit, next_commit}
        if extra:
            raise Broken(f"iteration {it}: snapshots from nowhere: {sorted(extra)}")
        if next_commit and next_commit not in after:
            raise Broken(f"iteration {it}: the create after the kill is not reachable")
        if new_commit and not finished:
            stats["committed" if new_commit in after else "rolled back"] += 1
        o.blobs_and_headers()
        o.snapctl_agrees(base)
        if nxt in ("status", "verify"):
            run(["recover", "--snapshots-root", root], base)
        o.no_temp_files()
        stats["invariant checks"] += 1
        before = after
    elapsed = time.monotonic() - t0
    if killed < iters:
        raise Broken(f"kill: only {killed} of {it} runs were still running at their kill")
    print(f"kill -9: {killed} runs killed mid-run ({stats['create']} create, {stats['rollback']} rollback "
          f"started; {stats['finished before the kill']} more finished before their kill); "
          f"killed creates: {stats['committed']} committed, {stats['rolled back']} rolled back; "
          f"invariants held after {stats['invariant checks']}/{it} runs; "
          f"{len(o.reachable())} snapshots reachable, 0 lost; {elapsed:.1f} s", flush=True)
    print(f"  steps of an uninterrupted run: create {nsteps['create']}, rollback {nsteps['rollback']}")
    print("  kills landed in: " + ", ".join(f"{k} {v}" for k, v in sorted(phases.items())))
    print("  next command: " + ", ".join(f"{k} {v}" for k, v in sorted(nexts.items())))
    return killed


# --------------------------------------------------------------------------
def tree_state(root):
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)
            if rel in (".snapctl/lock", ".snapctl/.gitignore"):
                continue
            if rel.startswith("store/cas/sha256/") and HEX64.match(os.path.basename(rel)):
                # A blob uploaded before a later step failed stays (content
                # addressed, maybe already shared; `gc --dry-run` lists it):
                # it must hash to its name, checked by all_blobs_hash_to_names.
                continue
            with open(p, "rb") as fh:
                out[rel] = hashlib.sha256(fh.read()).hexdigest()
    return out


def enospc(work, rng):
    if os.geteuid() != 0:
        print("enospc: SKIPPED (not root: cannot mount a tmpfs)", flush=True)
        return 0
    mnt = os.path.join(work, "tiny")
    os.makedirs(mnt)
    size_kib = 4096
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"enospc: SKIPPED (mount -t tmpfs failed: {r.stderr.strip()})", flush=True)
        return 0
    try:
        root = os.path.join(mnt, "root")
        os.makedirs(root)
        art = os.path.join(work, "enospc-art")
        o = Oracle(root)
        commit = 0
        failed = succeeded = 0
        where = {}
        # 0. One snapshot to start from.
        commit += 1
        a = write_artifact(art, "librcclx-dev.a", 32 << 10, rng)
        h = os.path.join(art, "rccl.h")
        with open(h, "w") as f:
            f.write("/* 1 */\n")
        run(create_args(root, "6.4", a, h, commit), work)
        succeeded += 1
        # 1. Artifacts larger than the whole filesystem.
        for size in (5 << 20, 8 << 20):
            commit += 1
            a = write_artifact(art, "librcclx-dev.a", size, rng)
            h = os.path.join(art, "rccl.h")
            with open(h, "w") as f:
                f.write(f"/* {commit} */\n")
            before = tree_state(root)
            p = run(create_args(root, "6.4", a, h, commit), work, check=False)
            if p.returncode != 2 or "No space left on device" not in p.stderr:
                raise Broken(f"enospc: {size}-byte artifact: exit {p.returncode}: {p.stderr}")
            if tree_state(root) != before:
                raise Broken("enospc: a failed create changed the tree")
            o.no_temp_files()
            failed += 1
        # 2. Free space moved across every point of a create: a filler file
        #    leaves `free` bytes, from nothing to enough for the whole create.
        filler = os.path.join(mnt, "filler")
        art_size = 64 << 10
        free = 0
        step = 8 << 10
        while free <= art_size + (160 << 10):
            commit += 1
            a = write_artifact(art, "librcclx-dev.a", art_size, rng)
            h = os.path.join(art, "rccl.h")
            with open(h, "w") as f:
                f.write(f"/* {commit} */\n" * 200)
            if os.path.exists(filler):
                os.remove(filler)
            st = os.statvfs(mnt)
            avail = st.f_bavail * st.f_frsize
            with open(filler, "wb") as f:
                try:
                    f.write(b"\0" * max(0, avail - free))
                except OSError:
                    pass
            before = tree_state(root)
            e = {"SNAPCTL_TRACE_STEPS": "1"}
            p = run(create_args(root, "6.4", a, h, commit), work, check=False, extra=e)
            journal = os.path.join(root, ".snapctl", "journal.json")
            if p.returncode == 0:
                succeeded += 1
            else:
                if p.returncode != 2 or "No space left on device" not in p.stderr:
                    raise Broken(f"enospc: free {free}: exit {p.returncode}: {p.stderr[-2000:]}")
                ph = phase_of(last_step(p.stderr))
                if os.path.exists(journal):
                    # Failed after the commit point: the next command completes it.
                    os.remove(filler)
                    run(["recover", "--snapshots-root", root], work)
                    if f"{commit:040x}" not in o.reachable():
                        raise Broken(f"enospc: free {free}: committed create not completed by recover")
                    ph += " (committed; recover completed it)"
                elif tree_state(root) != before:
                    raise Broken(f"enospc: free {free}: a failed create changed the tree")
                where[ph] = where.get(ph, 0) + 1
                failed += 1
            o.no_temp_files()
            o.all_blobs_hash_to_names()
            if os.path.exists(filler):
                os.remove(filler)
            o.blobs_and_headers()
            o.snapctl_agrees(work)
            free += step
        if succeeded == 0:
            raise Broken("enospc: no create succeeded even with enough space")
        print(f"enospc: {failed + succeeded} creates on a {size_kib} KiB tmpfs, {failed} failed with "
              f"ENOSPC (exit 2; last step reached: "
              f"{', '.join(f'{k} {v}' for k, v in sorted(where.items()))}), {succeeded} succeeded; "
              f"no temp file left, tree unchanged by every failure", flush=True)
        return failed + succeeded
    finally:
        subprocess.run(["umount", mnt])


# --------------------------------------------------------------------------
def s3(work, url, endpoint, rng):
    bucket_prefix = url[len("s3://"):]
    base = os.path.join(work, "s3")
    root = os.path.join(base, "root")
    os.makedirs(root)
    art = os.path.join(base, "art")
    os.makedirs(art)
    a = os.path.join(art, "librcclx-dev.a")
    h = os.path.join(art, "rccl.h")
    with open(h, "w") as f:
        f.write("/* s3 */\n")
    size = 6 << 20
    with open(a, "wb") as f:
        f.write(rng.randbytes(size))

    def obj_url(key):
        return f"{endpoint.rstrip('/')}/{bucket_prefix.strip('/')}/{key}"

    # moto refuses anonymous object access but does not check signatures.
    auth = {"Authorization": "AWS4-HMAC-SHA256 Credential=rocpack/20260101/us-east-1/s3/"
                             "aws4_request, SignedHeaders=host, Signature=00",
            "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
            "Content-Type": "application/octet-stream"}

    def get(key):
        req = urllib.request.Request(obj_url(key), headers=auth)
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    # 1. A poisoned object (wrong bytes under the artifact's digest) is replaced.
    good = open(a, "rb").read()
    sha = hashlib.sha256(good).hexdigest()
    req = urllib.request.Request(obj_url(f"cas/sha256/{sha}"), data=b"poison", method="PUT",
                                 headers=auth)
    urllib.request.urlopen(req, timeout=30).read()
    p = run(create_args(root, "6.4", a, h, 1) + ["--store", url], base)
    if hashlib.sha256(get(f"cas/sha256/{sha}")).hexdigest() != sha:
        raise Broken("s3: the poisoned object is still there after create")
    print(f"s3: poisoned object cas/sha256/{sha[:12]}... replaced by create "
          f"({p.stdout.splitlines()[0]})", flush=True)

    # 2. The artifact changes in place while create copies/hashes/uploads it.
    stop = threading.Event()
    writes = [0]

    def mutate():
        r2 = random.Random(7)
        while not stop.is_set():
            with open(a, "r+b") as f:
                if r2.random() < 0.1:
                    f.truncate(r2.randrange(size // 2, size))
                else:
                    f.seek(r2.randrange(0, size))
                    f.write(r2.randbytes(4096))
            writes[0] += 1
            time.sleep(0.001)

    th = threading.Thread(target=mutate, daemon=True)
    th.start()
    n = 12
    keys = set()
    refused = 0
    try:
        for i in range(n):
            # Refused (the file changed while it was read: never published
            # torn) or a whole version of it published.
            p = run(create_args(root, "6.4", a, h, 100 + i), base, check=False)
            if p.returncode == 2 and "changed while snapctl read it" in p.stderr:
                refused += 1
                continue
            if p.returncode != 0:
                raise Broken(f"s3: create exited {p.returncode}: {p.stderr}")
            m = re.search(r"(uploaded|reused) cas/sha256/([0-9a-f]{64})", p.stdout)
            if not m:
                raise Broken(f"s3: unexpected create output: {p.stdout}")
            keys.add(m.group(2))
    finally:
        stop.set()
        th.join()
    bad = [k for k in keys if hashlib.sha256(get(f"cas/sha256/{k}")).hexdigest() != k]
    if bad:
        raise Broken(f"s3: objects whose bytes do not hash to their name: {bad}")
    run(["verify", "--snapshots-root", root, "--all"], base)
    fetched = os.path.join(base, "got.a")
    run(["fetch", "--snapshots-root", root, "--version", "6.4", "-o", fetched], base)
    want = parse_meta(os.path.join(root, "stable", "6.4", "metadata.txt"))[0]
    if sha256(fetched) != want:
        raise Broken("s3: fetched bytes do not match the stable metadata")
    print(f"s3: {n} creates while the artifact was rewritten in place {writes[0]} times: "
          f"{refused} refused (changed while read), {n - refused} published; "
          f"{len(keys)} distinct objects, every one hashes to its name; verify --all and fetch ok",
          flush=True)
    return n


def main():
    global SNAPCTL
    ap = argparse.ArgumentParser()
    ap.add_argument("--snapctl", required=True)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--kills", type=int, default=500)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--s3-url", default=os.environ.get("SNAPCTL_STRESS_S3_URL"))
    ap.add_argument("--only", default="concurrent,kill,enospc,s3")
    a = ap.parse_args()
    SNAPCTL = os.path.abspath(a.snapctl)
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed} (re-run with --seed {seed})", flush=True)
    rng = random.Random(seed)
    only = set(a.only.split(","))
    # On tmpfs by default: races and kills do not depend on fsync being slow,
    # and the run stays within its few minutes on a loaded machine.
    base = os.environ.get("SNAPCTL_STRESS_DIR") or (
        "/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    work = tempfile.mkdtemp(prefix="snapctl-stress-", dir=base)
    print(f"work dir {work}", flush=True)
    try:
        if "concurrent" in only:
            concurrent(work, a.rounds, a.procs, rng)
        if "kill" in only:
            kill_loop(work, a.kills, rng)
        if "enospc" in only:
            enospc(work, rng)
        if "s3" in only:
            endpoint = os.environ.get("AWS_ENDPOINT_URL")
            if a.s3_url and endpoint:
                s3(work, a.s3_url, endpoint, rng)
            else:
                print("s3: SKIPPED (no SNAPCTL_STRESS_S3_URL + AWS_ENDPOINT_URL; "
                      "tests/ci/30-snapshot.sh runs it against moto)", flush=True)
    except Broken as e:
        print(f"FAILED: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("snapshot stress: all invariants held", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
