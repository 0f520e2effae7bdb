package netpolicy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/sandcell/sandcell/internal/egress"
)

// dnsTTL is the TTL of the gateway's answers: the address of a name never
// changes for the gateway's life, so caches may keep it.
const dnsTTL = 300

// dnsIdle ends a DNS flow (UDP or TCP) that asked nothing for so long.
const dnsIdle = 10 * time.Second

// forwardUDP serves DNS to the gateway's address and drops every other
// datagram (raw UDP leaves nothing: QUIC, a UDP tunnel, DNS to another
// server), logging the refusal.
func (g *Gateway) forwardUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	dst := netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
	if dst.Addr() != GatewayAddr || dst.Port() != 53 {
		g.refuse(Entry{Proto: "udp", Dest: dst.String()}, refusedf("raw UDP to %s dropped; only DNS to %s is answered", dst, GatewayAddr))
		return true
	}
	if !g.dnsFlow(dst.String()) {
		return true
	}
	var wq waiter.Queue
	ep, err := r.CreateEndpoint(&wq)
	if err != nil {
		<-g.dns
		g.log.Info("network gateway: dns endpoint", "err", err.String())
		return true
	}
	c := gonet.NewUDPConn(&wq, ep)
	g.wg.Go(func() {
		defer func() { <-g.dns }()
		defer c.Close()
		defer context.AfterFunc(g.ctx, func() { c.Close() })()
		buf := make([]byte, 1500)
		for {
			c.SetReadDeadline(time.Now().Add(dnsIdle))
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if reply := g.answer(buf[:n], dst.String()); reply != nil {
				if len(reply) > 512 {
					reply = truncated(buf[:n])
				}
				c.Write(reply)
			}
		}
	})
	return true
}

// MaxDNSFlows bounds the DNS flows (a UDP source port, a TCP connection)
// served at once: each holds an endpoint and a goroutine until it is idle
// for dnsIdle, and a program could otherwise open one per source port.
const MaxDNSFlows = 64

// dnsFlow takes a DNS flow's place, or refuses the flow when all are taken.
func (g *Gateway) dnsFlow(dest string) bool {
	select {
	case g.dns <- struct{}{}:
		return true
	default:
		g.refuse(Entry{Proto: "dns", Dest: dest}, refusedf("dns: %d flows open at once", MaxDNSFlows))
		return false
	}
}

// serveDNSTCP serves DNS over TCP (RFC 7766: length-prefixed messages).
func (g *Gateway) serveDNSTCP(c net.Conn, dest string) {
	defer c.Close()
	for {
		c.SetDeadline(time.Now().Add(dnsIdle))
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		reply := g.answer(msg, dest)
		if reply == nil {
			return
		}
		if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(reply)))); err != nil {
			return
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

// answer is the reply to one query (nil: not a query, dropped). Only an
// allowlisted name gets an answer: an A record from NamePool; AAAA and
// every other type an empty answer. A name off the allowlist is REFUSED
// and never asked of any resolver, so no query carries data out (a DNS
// tunnel) and no answer carries data in. An allowlisted name that does
// not resolve on the host is NXDOMAIN; one that resolves to a non-public
// address (rebinding) is REFUSED.
func (g *Gateway) answer(q []byte, dest string) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if err != nil || len(qs) != 1 || h.OpCode != 0 {
		rh.RCode = dnsmessage.RCodeFormatError
		return build(rh, qs, nil)
	}
	question := qs[0]
	name := question.Name.String()
	host, _, err := g.egress.CheckName(g.ctx, name)
	if err != nil {
		rh.RCode = dnsmessage.RCodeRefused
		if strings.Contains(err.Error(), "resolve ") {
			rh.RCode = dnsmessage.RCodeNameError
		}
		g.refuse(Entry{Proto: "dns", Host: strings.TrimSuffix(name, "."), Dest: dest},
			fmt.Errorf("dns %s %s: %w", strings.TrimPrefix(question.Type.String(), "Type"), strings.TrimSuffix(name, "."), err))
		return build(rh, qs, nil)
	}
	if question.Type != dnsmessage.TypeA || question.Class != dnsmessage.ClassINET {
		return build(rh, qs, nil) // NODATA: the name exists, this type carries nothing
	}
	a, ok := g.names.addr(host)
	if !ok {
		rh.RCode = dnsmessage.RCodeRefused
		g.refuse(Entry{Proto: "dns", Host: host, Dest: dest}, refusedf("budget: %d names handed out", g.budget.Names))
		return build(rh, qs, nil)
	}
	return build(rh, qs, &dnsmessage.AResource{A: a.As4()})
}

// build is a reply with the questions and at most one A answer.
func build(h dnsmessage.Header, qs []dnsmessage.Question, a *dnsmessage.AResource) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	b.StartQuestions()
	for _, q := range qs {
		b.Question(q)
	}
	if a != nil {
		b.StartAnswers()
		b.AResource(dnsmessage.ResourceHeader{Name: qs[0].Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: dnsTTL}, *a)
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// truncated is the TC reply to q: ask again over TCP.
func truncated(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	return build(dnsmessage.Header{ID: h.ID, Response: true, Truncated: true}, nil, nil)
}

// refuse logs a refusal and records it.
func (g *Gateway) refuse(e Entry, err error) {
	e.Refused = err.Error()
	if _, kept := g.account.add(e); !kept {
		return // a flood of refusals is counted, not logged line by line
	}
	if errors.Is(err, egress.ErrRefused) || errors.Is(err, errRefused) {
		g.log.Warn("network refused", "proto", e.Proto, "host", e.Host, "dest", e.Dest, "reason", e.Refused)
	} else {
		g.log.Info("network failed", "proto", e.Proto, "host", e.Host, "dest", e.Dest, "reason", e.Refused)
	}
}

// ServeDNS answers the queries that reach c, a UDP socket the runtime
// bound to 127.0.0.1:53 in the sandbox's network namespace: the images
// carry no /etc/resolv.conf, and without one every resolver (glibc, musl,
// Go's) asks 127.0.0.1:53, so the sandbox's names are the gateway's there
// too, with the same policy as at GatewayAddr. The gateway owns c: it is
// closed when the gateway closes. A reply goes only to the address the
// query came from, inside the namespace.
func (g *Gateway) ServeDNS(c net.PacketConn) {
	dest := c.LocalAddr().String()
	stop := context.AfterFunc(g.ctx, func() { c.Close() })
	g.wg.Go(func() {
		defer stop()
		defer c.Close()
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			if reply := g.answer(buf[:n], dest); reply != nil {
				if len(reply) > 512 {
					reply = truncated(buf[:n])
				}
				c.WriteTo(reply, from)
			}
		}
	})
}

// MTU is the tun's MTU, which the runtime gives the sandbox's side too.
func (g *Gateway) MTU() uint32 { return g.mtu }
