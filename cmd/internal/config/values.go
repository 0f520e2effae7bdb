package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/rootfs"
)

// The flag values of settings that are not a plain string, number or
// duration. Each is a flag.Getter whose String is what the flag was set to
// (so `sandcell config show` prints the effective value) and whose Get
// gives the typed value for the TOML output: a string, a []string or a
// map.

// sizeValue is a size with a unit ("128MiB"); Get is its text.
type sizeValue struct{ p *int64 }

func (v sizeValue) String() string {
	if v.p == nil || *v.p == 0 {
		return "0"
	}
	return strings.ReplaceAll(limits.FormatSize(*v.p), " ", "")
}

func (v sizeValue) Set(s string) error {
	n, err := limits.ParseSize(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}

func (v sizeValue) Get() any { return v.String() }

// listValue is a repeatable flag: each use adds an entry (check, if set,
// vets it); the first use replaces the default list.
type listValue struct {
	p     *[]string
	set   bool
	split bool // a use may give several, comma-separated
	check func(string) error
}

func (v *listValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (v *listValue) Set(s string) error {
	items := []string{s}
	if v.split {
		items = splitList(s)
	}
	for _, it := range items {
		if v.check != nil {
			if err := v.check(it); err != nil {
				return err
			}
		}
	}
	if !v.set {
		*v.p, v.set = nil, true
	}
	*v.p = append(*v.p, items...)
	return nil
}

func (v *listValue) Get() any {
	if len(*v.p) == 0 {
		return []string{}
	}
	return slices.Clone(*v.p)
}

// pairValue is a repeatable KEY=VALUE flag into a map (--deps-index
// LANG=URL); parse vets and converts the value.
type pairValue[V any] struct {
	p     *map[string]V
	what  string // "LANG=URL", for the message
	lower bool   // keys are case-insensitive (host names)
	parse func(key, val string, old V) (V, error)
	show  func(V) []string
}

// String is "" for the zero value too: the flag package calls it on one
// to tell whether a default is worth printing in the help.
func (v *pairValue[V]) String() string {
	if v.p == nil {
		return ""
	}
	var parts []string
	for _, k := range v.keys() {
		for _, s := range v.show((*v.p)[k]) {
			parts = append(parts, k+"="+s)
		}
	}
	return strings.Join(parts, ",")
}

func (v *pairValue[V]) keys() []string {
	var ks []string
	for k := range *v.p {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (v *pairValue[V]) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not %s", s, v.what)
	}
	if v.lower {
		k = strings.ToLower(k)
	}
	if *v.p == nil {
		*v.p = map[string]V{}
	}
	n, err := v.parse(k, val, (*v.p)[k])
	if err != nil {
		return err
	}
	(*v.p)[k] = n
	return nil
}

// Get is the map as TOML writes it: key -> []string.
func (v *pairValue[V]) Get() any {
	m := map[string][]string{}
	for _, k := range v.keys() {
		m[k] = v.show((*v.p)[k])
	}
	return m
}

func absPath(v string) error {
	if !filepath.IsAbs(v) {
		return fmt.Errorf("%q is not an absolute path", v)
	}
	return nil
}

func depsIndex(p *map[string]string) *pairValue[string] {
	return &pairValue[string]{p: p, what: "LANG=URL",
		parse: func(_, u, _ string) (string, error) {
			_, err := rootfs.ParseIndex(u)
			return u, err
		},
		show: func(u string) []string { return []string{u} }}
}

func egressAllow(p *map[string][]string) *pairValue[[]string] {
	return &pairValue[[]string]{p: p, what: "LANG=HOST:PORT",
		parse: func(_, hp string, old []string) ([]string, error) {
			if _, err := egress.New(egress.Config{Allow: []string{hp}}); err != nil {
				return nil, err
			}
			return append(old, hp), nil
		},
		show: slices.Clone[[]string]}
}

func networkAllow(p *map[string][]string) *pairValue[[]string] {
	return &pairValue[[]string]{p: p, what: "LANG=HOST[:PORT]",
		parse: func(_, hp string, old []string) ([]string, error) {
			if err := executor.CheckNetworkEntry(hp); err != nil {
				return nil, err
			}
			return append(old, hp), nil
		},
		show: slices.Clone[[]string]}
}

func egressHosts(p *map[string][]netip.Addr) *pairValue[[]netip.Addr] {
	v := &pairValue[[]netip.Addr]{p: p, what: "NAME=IP", lower: true,
		parse: func(_, ip string, old []netip.Addr) ([]netip.Addr, error) {
			a, err := netip.ParseAddr(ip)
			if err != nil {
				return nil, fmt.Errorf("%q is not an IP address", ip)
			}
			return append(old, a), nil
		},
		show: func(as []netip.Addr) []string {
			var out []string
			for _, a := range as {
				out = append(out, a.String())
			}
			return out
		}}
	return v
}

// boolInverse is a bool flag that sets *p to the opposite (--no-build
// true: AutoBuild false).
type boolInverse struct{ p *bool }

func (v boolInverse) String() string {
	if v.p == nil {
		return "false"
	}
	return strconv.FormatBool(!*v.p)
}

func (v boolInverse) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v.p = !b
	return nil
}

func (v boolInverse) Get() any         { return !*v.p }
func (v boolInverse) IsBoolFlag() bool { return true }
