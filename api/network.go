package api

// Network is a run's (or a live sandbox's) network policy (issue #40). Nil,
// or an empty Allow, is network mode none: the default, no interface but
// loopback. Otherwise the program's only route leads to sandcell's
// gateway, which answers DNS for the allowed names only and admits a TCP
// connection only to an allowed name and port (TLS SNI or the HTTP Host
// header naming it). The operator's ceiling (--network-allow) bounds it:
// a request can only narrow, and an entry the ceiling does not cover
// refuses the request. The same field serves execute_code, the REST APIs,
// sessions' runs and live sandboxes (SandboxSpec.Network).
type Network struct {
	// Allow are the hosts the program may reach: "name" or "*.suffix"
	// (every name under suffix, not suffix itself), with ":port" (no
	// port: 80 and 443).
	Allow []string `json:"allow,omitempty" jsonschema:"hosts the program may reach: name or *.suffix, optionally :port (default 80 and 443); the server's allowlist bounds it"`
	// Budgets; 0: the server's default. Each is clamped to the gateway's
	// ceiling.
	MaxConnections int   `json:"max_connections,omitempty" jsonschema:"connections the program may open in all (0: the server's default)"`
	MaxBytesOut    int64 `json:"max_bytes_out,omitempty" jsonschema:"bytes the program may send, all connections (0: default)"`
	MaxBytesIn     int64 `json:"max_bytes_in,omitempty" jsonschema:"bytes it may receive (0: default)"`
}

// Enabled reports whether n asks for any network.
func (n *Network) Enabled() bool { return n != nil && len(n.Allow) > 0 }

// NetworkEntry is one connection a program made or one the gateway
// refused (Refused says why).
type NetworkEntry struct {
	Proto    string `json:"proto" jsonschema:"tcp, udp or dns"`
	Host     string `json:"host,omitempty" jsonschema:"the name, when known"`
	Dest     string `json:"dest" jsonschema:"address:port the program used"`
	BytesOut int64  `json:"bytes_out" jsonschema:"bytes the program sent"`
	BytesIn  int64  `json:"bytes_in" jsonschema:"bytes it received"`
	Refused  string `json:"refused,omitempty" jsonschema:"why the gateway refused it; empty for a connection made"`
}

// NetworkLog is what a run with a network policy did: its first entries,
// how many more there were, and the totals charged to it.
type NetworkLog struct {
	Entries  []NetworkEntry `json:"entries" jsonschema:"connections made and refused, the first of them"`
	Omitted  int            `json:"omitted,omitempty" jsonschema:"entries not listed"`
	Conns    int            `json:"conns" jsonschema:"connections admitted"`
	BytesOut int64          `json:"bytes_out" jsonschema:"bytes sent in all"`
	BytesIn  int64          `json:"bytes_in" jsonschema:"bytes received in all"`
}

// Refusals are the log's refused entries.
func (l *NetworkLog) Refusals() []NetworkEntry {
	if l == nil {
		return nil
	}
	var r []NetworkEntry
	for _, e := range l.Entries {
		if e.Refused != "" {
			r = append(r, e)
		}
	}
	return r
}
