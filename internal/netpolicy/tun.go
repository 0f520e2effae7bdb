package netpolicy

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ResolvConf is the sandbox's /etc/resolv.conf: the gateway is its only
// name server (any other is raw UDP, dropped).
const ResolvConf = "nameserver 198.18.0.1\noptions attempts:2 timeout:2\n"

// OpenTun creates the tun device name in the network namespace of the
// calling thread (lock it to the thread and enter the sandbox's namespace
// first) and returns its fd, for AttachTun: IFF_TUN|IFF_NO_PI (bare IP
// packets, as the gateway reads them), non-blocking, close-on-exec. The
// device lives as long as the fd; its address, MTU and routes are the
// caller's to set (SandboxAddr/PrefixLen, Config.MTU, default route).
func OpenTun(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("tun %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	return fd, nil
}
