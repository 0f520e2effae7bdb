/* Socket families the seccomp filter refuses, each with a record:
 * AF_ALG with authencesn wrote into the page cache of any readable file
 * ("Copy Fail", CVE-2026-31431; also CVE-2021-3609-era crypto bugs),
 * AF_PACKET forges frames (CVE-2020-14386, CVE-2017-7308), raw and
 * SOCK_PACKET sockets spoof packets, AF_VSOCK reaches the hypervisor
 * (CVE-2021-26708), NETLINK_NETFILTER reaches nf_tables (CVE-2022-32250,
 * CVE-2023-32233), SCTP and MPTCP are large and young. If AF_ALG were
 * open, the Copy Fail algorithm is bound to show that the path exists. */
#include "probe.h"
#include <sys/socket.h>
#include <netinet/in.h>
#include <linux/netlink.h>

#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

struct sockaddr_alg_ {
	unsigned short salg_family;
	unsigned char salg_type[14];
	unsigned int salg_feat, salg_mask;
	unsigned char salg_name[64];
};

static long alg_bind(void) {
	int s = socket(AF_ALG, SOCK_SEQPACKET, 0);
	if (s < 0)
		return -1;
	struct sockaddr_alg_ sa;
	memset(&sa, 0, sizeof sa);
	sa.salg_family = AF_ALG;
	strcpy((char *)sa.salg_type, "aead");
	strcpy((char *)sa.salg_name, "authencesn(hmac(sha256),cbc(aes))");
	return bind(s, (struct sockaddr *)&sa, sizeof sa);
}

int main(void) {
	PROBE("af_alg", socket(AF_ALG, SOCK_SEQPACKET, 0));
	PROBE("af_alg_authencesn_bind", alg_bind());
	PROBE("af_packet_raw", socket(AF_PACKET, SOCK_RAW, 0));
	PROBE("af_packet_dgram", socket(AF_PACKET, SOCK_DGRAM, 0));
	PROBE("af_inet_sock_packet", socket(AF_INET, SOCK_PACKET, 0));
	PROBE("af_inet_raw_icmp", socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
	PROBE("af_inet_raw_tcp", socket(AF_INET, SOCK_RAW, IPPROTO_TCP));
	PROBE("af_inet6_raw", socket(AF_INET6, SOCK_RAW, IPPROTO_ICMPV6));
	PROBE("af_inet_ping", socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP));
	PROBE("af_vsock_stream", socket(AF_VSOCK, SOCK_STREAM, 0));
	PROBE("af_vsock_dgram", socket(AF_VSOCK, SOCK_DGRAM, 0));
	PROBE("netlink_netfilter", socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER));
	PROBE("netlink_audit", socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT));
	PROBE("netlink_kobject_uevent", socket(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT));
	PROBE("af_inet_sctp", socket(AF_INET, SOCK_SEQPACKET, IPPROTO_SCTP));
	PROBE("af_inet_mptcp", socket(AF_INET, SOCK_STREAM, 262));
	PROBE("af_key", socket(15 /* AF_KEY */, SOCK_RAW, 2));
	PROBE("af_bluetooth", socket(31 /* AF_BLUETOOTH */, SOCK_RAW, 0));
	PROBE("af_xdp", socket(44 /* AF_XDP */, SOCK_RAW, 0));
	PROBE("socketpair_inet", ({ int sv[2]; socketpair(AF_INET, SOCK_STREAM, 0, sv); }));
	say("done\n");
	return 0;
}
