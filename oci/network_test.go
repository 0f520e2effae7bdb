package oci

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandcell/sandcell/limits"
)

func TestNetworkSpec(t *testing.T) {
	req := &Request{Root: "/r", Args: []string{"/bin/true"}, Limits: limits.Defaults()}
	h := Host{WorkDir: "/w", UIDBase: 100000, Seccomp: &specs.LinuxSeccomp{}}
	s, err := Spec(req, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range s.Process.Env {
		if strings.Contains(strings.ToLower(e), "proxy") {
			t.Errorf("network none: env has %q", e)
		}
	}
	n := len(s.Mounts)

	req.Egress = "/run/sandcell/egress-1/proxy.sock"
	req.Mounts = []Mount{{Source: "/store/deps/k/root", Destination: "/tmp/deps"}, {Source: "/stage", Destination: "/tmp/out", Writable: true}}
	s, err = Spec(req, h)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(s.Process.Env, "HTTPS_PROXY=http://127.0.0.1:3128") || !slices.Contains(s.Process.Env, "NO_PROXY=") {
		t.Errorf("egress: env %q", s.Process.Env)
	}
	if len(s.Mounts) != n+2 {
		t.Fatalf("mounts %d, want %d", len(s.Mounts), n+2)
	}
	ro, rw := s.Mounts[n], s.Mounts[n+1]
	if ro.Destination != "/tmp/deps" || !slices.Contains(ro.Options, "ro") || !slices.Contains(ro.Options, "nosuid") || !slices.Contains(ro.Options, "nodev") {
		t.Errorf("read-only mount %+v", ro)
	}
	if !slices.Contains(rw.Options, "rw") {
		t.Errorf("writable mount %+v", rw)
	}
	// The spec namespaces are unchanged: egress adds no interface.
	if !slices.ContainsFunc(s.Linux.Namespaces, func(ns specs.LinuxNamespace) bool { return ns.Type == specs.NetworkNamespace && ns.Path == "" }) {
		t.Error("egress run lost its own network namespace")
	}

	for _, bad := range []Request{
		{Egress: "relative.sock"},
		{Mounts: []Mount{{Source: "rel", Destination: "/tmp/deps"}}},
		{Mounts: []Mount{{Source: "/s", Destination: "/usr/lib"}}},
		{Mounts: []Mount{{Source: "/s", Destination: "/tmp"}}},
		{Mounts: []Mount{{Source: "/s", Destination: "/tmp/../etc"}}},
		{Mounts: []Mount{{Source: "/s", Destination: "/tmp/a"}, {Source: "/t", Destination: "/tmp/a"}}},
	} {
		r := *req
		r.Egress, r.Mounts = bad.Egress, bad.Mounts
		if err := r.Validate(); err == nil {
			t.Errorf("request with egress %q mounts %+v accepted", bad.Egress, bad.Mounts)
		}
	}
}

// TestNetworkPolicySpec: a run with a network policy gets the root's
// nsswitch.conf with DNS in its hosts line, read-only (the images say
// "hosts: files", so glibc would never ask the gateway); never together
// with egress.
func TestNetworkPolicySpec(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "nsswitch.conf"), []byte("passwd: files\nhosts:   files\nnetworks: files\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := NSSwitchWithDNS(root)
	if err != nil || string(data) != "passwd: files\nhosts: files dns\nnetworks: files\n" {
		t.Errorf("NSSwitchWithDNS: %q %v", data, err)
	}
	if data, err := NSSwitchWithDNS(t.TempDir()); data != nil || err != nil {
		t.Errorf("a root without nsswitch.conf: %q %v, want nothing", data, err)
	}
	req := &Request{Root: root, Args: []string{"/bin/true"}, Limits: limits.Defaults(), Network: noGateway{}}
	h := Host{WorkDir: "/w", UIDBase: 100000, Seccomp: &specs.LinuxSeccomp{}, NSSwitch: "/run/x/nsswitch.conf"}
	s, err := Spec(req, h)
	if err != nil {
		t.Fatal(err)
	}
	m := s.Mounts[len(s.Mounts)-1]
	if m.Destination != "/etc/nsswitch.conf" || m.Source != h.NSSwitch || !slices.Contains(m.Options, "ro") {
		t.Errorf("last mount %+v, want nsswitch.conf read-only", m)
	}
	req.Egress = "/run/sandcell/egress-1/proxy.sock"
	if _, err := Spec(req, h); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("egress and a network policy: %v, want ErrInvalidRequest", err)
	}
}

type noGateway struct{}

func (noGateway) AttachTun(int) error       { return nil }
func (noGateway) ServeDNS(c net.PacketConn) {}
func (noGateway) MTU() uint32               { return 1500 }
