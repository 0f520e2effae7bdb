package executor

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/oci"
)

// TestNetworkPolicyNarrows: a request's network policy is refused unless
// the operator's ceiling (global "*" or the language's) covers each entry;
// it can only narrow (a wider wildcard, another host, another port, a
// language without a ceiling, a backend that cannot confine it are
// refusals that say why). An entry without a port keeps 80 and 443 as far
// as the ceiling allows.
func TestNetworkPolicyNarrows(t *testing.T) {
	none := newRig(t)
	if _, err := none.Execute(context.Background(), Request{Request: api.Request{Language: "python", Source: []byte("x"),
		Network: &api.Network{Allow: []string{"pypi.org"}}}}); !errors.Is(err, ErrNetwork) || !strings.Contains(err.Error(), "--network-allow") {
		t.Errorf("no ceiling: %v, want a refusal naming --network-allow", err)
	}
	r := newRig(t, func(s *Settings) {
		s.Network.Allow = map[string][]string{"*": {"*.example.com:443"}, "python": {"git.test"}}
	})
	cases := []struct {
		lang, iso string
		allow     []string
		want      string // "" ok, else a part of the refusal
	}{
		{"python", "", []string{"a.example.com"}, ""},
		{"python", "", []string{"*.a.example.com:443", "git.test:8443"}, ""},
		{"python", "", []string{"*.example.com:443"}, ""},
		{"python", "", []string{"*.com:443"}, `"*.com:443" is outside`},
		{"python", "", []string{"example.com:443"}, "outside"},
		{"python", "", []string{"a.example.com:80"}, "outside"},
		{"python", "", []string{"evil.test"}, "outside"},
		{"python", "", []string{"1.2.3.4"}, "outside"},
		{"javascript", "", []string{"git.test"}, "outside the server's allowlist for javascript"},
		{"python", "gvisor", []string{"a.example.com"}, "runc only"},
		{"python", "", []string{"a b"}, "a name or *.suffix"},
	}
	for _, c := range cases {
		_, err := r.Execute(context.Background(), Request{Request: api.Request{Language: c.lang, Isolation: c.iso, Source: []byte("x"),
			Network: &api.Network{Allow: c.allow}}})
		if c.want == "" && err != nil || c.want != "" && (!errors.Is(err, ErrNetwork) || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s %s %q: %v, want %q", c.lang, c.iso, c.allow, err, c.want)
		}
	}
	// No policy, no gateway: network mode none.
	if _, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "python", Source: []byte("x"), Network: &api.Network{}}}); err != nil {
		t.Fatal(err)
	}
	for i, req := range r.rts.backends["runc"].requests() {
		if got, want := req.Network != nil, i < 3; got != want {
			t.Errorf("run %d: gateway %v, want %v", i, got, want)
		}
	}
}

// TestNetworkPolicyGateway: the run phase, and it alone, gets a gateway
// with the narrowed allowlist and the operator's name mappings; the
// result carries its log, refusals included.
func TestNetworkPolicyGateway(t *testing.T) {
	r := newRig(t, func(s *Settings) {
		s.Network.Allow = map[string][]string{"*": {"*.example.com:443", "other.example.org:443"}}
		s.Deps.Hosts = map[string][]netip.Addr{"a.example.com": {netip.MustParseAddr("127.0.0.1")}}
	})
	var answers []string
	r.rts.backends["runc"].script = func(req *oci.Request) (api.Phase, error) {
		if req.Network == nil {
			return api.Phase{Status: api.StatusOK}, nil // the compile phase
		}
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return api.Phase{}, err
		}
		req.Network.ServeDNS(pc)
		res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return net.Dial("udp", pc.LocalAddr().String())
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, name := range []string{"a.example.com", "other.example.org"} {
			a, err := res.LookupNetIP(ctx, "ip4", name)
			if err != nil {
				answers = append(answers, name+" refused")
			} else {
				answers = append(answers, name+" "+a[0].String())
			}
		}
		return api.Phase{Status: api.StatusOK}, nil
	}
	res, err := r.Execute(context.Background(), Request{Request: api.Request{Language: "c", Source: []byte("int main(){}"),
		Network: &api.Network{Allow: []string{"a.example.com:443"}}}})
	if err != nil {
		t.Fatal(err)
	}
	reqs := r.rts.backends["runc"].requests()
	if len(reqs) != 2 || reqs[0].Network != nil || reqs[1].Network == nil {
		t.Fatalf("%d sandboxes: want two, a gateway for the run phase's only", len(reqs))
	}
	if len(answers) != 2 || !strings.HasPrefix(answers[0], "a.example.com 198.19.") || answers[1] != "other.example.org refused" {
		t.Errorf("answers %q: want a.example.com from the pool, other.example.org (in the ceiling, not asked) refused", answers)
	}
	if res.Network == nil || len(res.Network.Refusals()) == 0 || !strings.Contains(res.Network.Refusals()[0].Refused, "other.example.org") {
		t.Errorf("result's network log %+v: want the refusal of other.example.org", res.Network)
	}
}
