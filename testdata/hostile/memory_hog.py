# Allocates and touches memory in 16 MiB steps until the memory cgroup's
# OOM killer ends it (swap is 0). Reaching 2 GiB means no limit held.
chunks = []
for i in range(128):
    chunks.append(b"\x01" * (16 << 20))  # written, so the pages are real
    print(f"allocated {(i + 1) * 16} MiB", flush=True)
print("2 GiB allocated under a small limit ESCAPED", flush=True)
