"""The distinct pages a running process touches in one second, by mapping.

Clears the process's referenced bits (/proc/PID/clear_refs), waits, and sums the "Referenced"
field of /proc/PID/smaps per mapping. Private pages (heap, stack, anonymous) count this process's
touches only; a shared file page also counts when another process touched it (the page's own
referenced flag is shared), so file-backed figures are upper bounds.

Used for BENCHMARKS.md's 1,024-worker rows: run scale_bench's rounds at 64 workers
(SCALE_BENCH_SIZES=64 SCALE_BENCH_ROUNDS=30000 build/bench/scale_bench
--benchmark_filter=NoopRound64, or SocketpairRound64 for the floor's children) and point this at
one worker or child (the newest scale_bench process: pgrep -n -f scale_bench).

Usage (as root): /usr/bin/python3 bench/referenced_pages.py PID [SECONDS]
"""

import re
import sys
import time


def referenced_pages(pid, seconds):
    """{mapping name: pages referenced} after `seconds` of the process running."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("1")
    time.sleep(seconds)
    out, mapping = {}, None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                fields = line.split()
                mapping = fields[5] if len(fields) > 5 else "[anonymous]"
            elif line.startswith("Referenced:"):
                pages = int(line.split()[1]) // 4
                if pages:
                    out[mapping] = out.get(mapping, 0) + pages
    return out


def main():
    pid = int(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    pages = referenced_pages(pid, seconds)
    for mapping, n in sorted(pages.items(), key=lambda kv: -kv[1]):
        print(f"{n:6d}  {mapping}")
    private = sum(n for m, n in pages.items() if m in ("[heap]", "[stack]", "[anonymous]"))
    print(f"total {sum(pages.values())} pages, {private} of them private ([heap], [stack], "
          "[anonymous])")


if __name__ == "__main__":
    main()
