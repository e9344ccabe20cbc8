#!/usr/bin/env python3
"""TCP byte counter between a build client and its remote-execution service (bench/remote.sh).

    remote_proxy.py LISTEN_PORT TARGET_PORT COUNTS_FILE

Listens on 127.0.0.1:LISTEN_PORT, forwards every connection to
127.0.0.1:TARGET_PORT and keeps COUNTS_FILE holding "UP DOWN": the bytes
sent by clients (uploads: blobs, action protos, gRPC framing) and received
by them, over all connections so far. Rewritten (temp file + rename) after
each chunk, so a reader never sees a torn line.
"""
import asyncio
import os
import sys

counts = [0, 0]


def save(path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (counts[0], counts[1]))
    os.replace(tmp, path)


async def pipe(reader, writer, idx, path):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            counts[idx] += len(data)
            save(path)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def main():
    listen, target, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    save(path)

    async def handle(cr, cw):
        try:
            sr, sw = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, sw, 0, path), pipe(sr, cw, 1, path))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
