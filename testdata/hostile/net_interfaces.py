# Network interfaces: only "lo" exists in the sandbox's network namespace
# (no veth, no host interface), and the routing table has no default
# route, so nothing can leave.
import os
import socket

names = sorted(n for _, n in socket.if_nameindex())
print("interfaces", names, flush=True)
if names != ["lo"]:
    print("interface other than lo ESCAPED", flush=True)
print("sys_class_net", sorted(os.listdir("/sys/class/net")), flush=True)
routes = open("/proc/net/route").read().splitlines()[1:]
print("ipv4 routes", len(routes), flush=True)
if any(r.split()[1] == "00000000" for r in routes):
    print("default route ESCAPED", flush=True)
