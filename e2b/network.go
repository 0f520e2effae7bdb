package e2b

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sandcell/sandcell/api"
)

// E2B's network options on create (openapi SandboxNetworkConfig and
// NewSandbox.allow_internet_access, e2b 2.x) mapped onto the sandbox's
// network policy (api.Network, issue #40). sandcell's sandboxes have no
// network unless a policy names hosts, and admit names only (an address
// that a name resolves to is the gateway's to check: SSRF, rebinding),
// so:
//   - allowOut's names ("host", "*.suffix") are the policy's allowlist;
//     its IP addresses and CIDR blocks are refused (a program reaches no
//     address by number);
//   - denyOut's addresses and blocks are what sandcell denies anyway;
//     allowOut only narrows E2B's default of all traffic when denyOut
//     holds all of it (ALL_TRAFFIC, 0.0.0.0/0) or allow_internet_access
//     is false, so allowOut without either (all traffic in E2B) is
//     refused: sandcell never gives unrestricted egress;
//   - allow_internet_access true is E2B's default, and SDKs send it on
//     every create unless told otherwise (the Python SDK always, the JS
//     SDK up to 2.45): it keeps the template's own policy (none unless the
//     operator gave the template one), as no option does; refusing it
//     refused every create of those SDKs;
//   - allowPublicTraffic must say what the server does with sandbox URLs
//     (Options.PublicPorts): it is the operator's, not a sandbox's;
//   - the rest (egressProxy, rules' transforms, maskRequestHost,
//     httpsPorts) is refused, not ignored.
//
// No network and no allow_internet_access stays no network: E2B's default
// of the whole internet is not sandcell's (README, "Live sandboxes").

// networkConfig is openapi SandboxNetworkConfig.
type networkConfig struct {
	AllowOut           []string `json:"allowOut"`
	DenyOut            []string `json:"denyOut"`
	AllowPublicTraffic *bool    `json:"allowPublicTraffic"`
	// Refused: nothing here serves them.
	EgressProxy     json.RawMessage `json:"egressProxy"`
	Rules           json.RawMessage `json:"rules"`
	MaskRequestHost json.RawMessage `json:"maskRequestHost"`
	HTTPSPorts      json.RawMessage `json:"httpsPorts"`
}

// allTraffic is E2B's ALL_TRAFFIC.
const allTraffic = "0.0.0.0/0"

// networkPolicy maps a create's network options onto a policy (nil: no
// network); an error says what cannot map, for a 400.
func (h *Handler) networkPolicy(n *networkConfig, internet *bool) (*api.Network, error) {
	if internet != nil && *internet {
		internet = nil // E2B's default: the template's policy
	}
	if n == nil {
		return nil, nil
	}
	for name, raw := range map[string]json.RawMessage{"network.egressProxy": n.EgressProxy, "network.rules": n.Rules,
		"network.maskRequestHost": n.MaskRequestHost, "network.httpsPorts": n.HTTPSPorts} {
		if len(raw) > 0 && string(raw) != "null" {
			return nil, fmt.Errorf("%s is not supported by sandcell's E2B drop-in", name)
		}
	}
	if p := n.AllowPublicTraffic; p != nil && *p != h.opt.PublicPorts {
		if h.opt.PublicPorts {
			return nil, fmt.Errorf("network.allowPublicTraffic false is not supported by this server: its sandboxes' URLs are public (the operator's setting)")
		}
		return nil, fmt.Errorf("network.allowPublicTraffic true is not supported by this server: its sandboxes' URLs need the sandbox's traffic access token (the operator's setting)")
	}
	denyAll := internet != nil && !*internet
	for _, d := range n.DenyOut {
		if !isAddress(d) {
			return nil, fmt.Errorf("network.denyOut %q: a CIDR block or an IP address (domain names are not supported for deny rules)", d)
		}
		denyAll = denyAll || d == allTraffic
	}
	if len(n.AllowOut) == 0 {
		return nil, nil
	}
	if !denyAll {
		return nil, fmt.Errorf("network.allowOut without denyOut [%q] allows all traffic in E2B, which sandcell's E2B drop-in does not give: add denyOut [%q] to allow only the hosts listed", allTraffic, allTraffic)
	}
	allow := make([]string, 0, len(n.AllowOut))
	for _, a := range n.AllowOut {
		if isAddress(a) {
			return nil, fmt.Errorf("network.allowOut %q: sandcell's sandboxes reach hosts by name only (a name or *.suffix), never an IP address or CIDR block", a)
		}
		allow = append(allow, strings.ToLower(a))
	}
	slices.Sort(allow)
	return &api.Network{Allow: slices.Compact(allow)}, nil
}

// isAddress reports whether s is an IP address or a CIDR block.
func isAddress(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	_, err := netip.ParsePrefix(s)
	return err == nil
}
