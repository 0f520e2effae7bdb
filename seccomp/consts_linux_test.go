package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestConstants checks the hand-written ABI values in rules.go against
// golang.org/x/sys/unix for the architecture the test runs on.
func TestConstants(t *testing.T) {
	tests := []struct {
		name      string
		got, want uint64
	}{
		{"EPERM", errnoEPERM, uint64(unix.EPERM)},
		{"ENOSYS", errnoENOSYS, uint64(unix.ENOSYS)},
		{"AF_UNIX", afUnix, unix.AF_UNIX},
		{"AF_INET", afInet, unix.AF_INET},
		{"AF_INET6", afInet6, unix.AF_INET6},
		{"AF_NETLINK", afNetlink, unix.AF_NETLINK},
		{"AF_PACKET", afPacket, unix.AF_PACKET},
		{"AF_ALG", afAlg, unix.AF_ALG},
		{"AF_VSOCK", afVsock, unix.AF_VSOCK},
		{"SOCK_RAW", sockRaw, unix.SOCK_RAW},
		{"SOCK_PACKET", sockPacket, unix.SOCK_PACKET},
		{"SOCK_STREAM", sockStream, unix.SOCK_STREAM},
		{"SOCK_DGRAM", sockDgram, unix.SOCK_DGRAM},
		{"IPPROTO_TCP", ipprotoTCP, unix.IPPROTO_TCP},
		{"IPPROTO_UDP", ipprotoUDP, unix.IPPROTO_UDP},
		{"IPPROTO_ICMP", ipprotoICMP, unix.IPPROTO_ICMP},
		{"IPPROTO_ICMPV6", ipprotoICMPv6, unix.IPPROTO_ICMPV6},
		{"NETLINK_ROUTE", netlinkRoute, unix.NETLINK_ROUTE},
		{"CLONE_NEWTIME", cloneNewTime, unix.CLONE_NEWTIME},
		{"CLONE_NEWNS", cloneNewNS, unix.CLONE_NEWNS},
		{"CLONE_NEWCGROUP", cloneNewCgroup, unix.CLONE_NEWCGROUP},
		{"CLONE_NEWUTS", cloneNewUTS, unix.CLONE_NEWUTS},
		{"CLONE_NEWIPC", cloneNewIPC, unix.CLONE_NEWIPC},
		{"CLONE_NEWUSER", cloneNewUser, unix.CLONE_NEWUSER},
		{"CLONE_NEWPID", cloneNewPID, unix.CLONE_NEWPID},
		{"CLONE_NEWNET", cloneNewNet, unix.CLONE_NEWNET},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %#x, want %#x", tt.name, tt.got, tt.want)
		}
	}
	// SOCK_NONBLOCK and SOCK_CLOEXEC must sit above the type mask, or the
	// masked compare would see them.
	if flags := uint64(unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC); flags&sockTypeMask != 0 {
		t.Errorf("socket flags %#x overlap sockTypeMask %#x", flags, sockTypeMask)
	}
	// Every socket type the kernel knows fits under the mask.
	for _, typ := range []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_RAW, unix.SOCK_RDM, unix.SOCK_SEQPACKET, unix.SOCK_DCCP, unix.SOCK_PACKET} {
		if typ&^sockTypeMask != 0 {
			t.Errorf("socket type %d does not fit sockTypeMask", typ)
		}
	}
}
