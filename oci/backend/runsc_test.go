package backend

import (
	"errors"
	"slices"
	"testing"

	"github.com/sandcell/sandcell/oci"
)

func TestRunscPlatforms(t *testing.T) {
	for _, tc := range []struct {
		help string
		want []string
	}{
		{"  -platform string\n    \tspecifies which platform to use: ptrace (default), kvm. (default \"ptrace\")\n", []string{"kvm", "ptrace"}},
		{"  -platform string\n    \tspecifies which platform to use: systrap (default), ptrace, kvm. (default \"systrap\")\n", []string{"kvm", "ptrace", "systrap"}},
		{"no such flag", []string{"ptrace"}},
	} {
		var got []string
		for p := range runscPlatforms(tc.help) {
			got = append(got, p)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("runscPlatforms(%q) = %v, want %v", tc.help, got, tc.want)
		}
	}
}

func TestChoosePlatform(t *testing.T) {
	old, current := []string{"kvm", "ptrace"}, []string{"kvm", "ptrace", "systrap"}
	for _, tc := range []struct {
		name    string
		cfg     RunscConfig
		offered []string
		want    string
		err     error
	}{
		{"2022 runsc: ptrace", RunscConfig{}, old, "ptrace", nil},
		{"current runsc: systrap", RunscConfig{}, current, "systrap", nil},
		{"asked for ptrace", RunscConfig{Platform: "ptrace"}, current, "ptrace", nil},
		{"kvm refused without opt-in", RunscConfig{Platform: "kvm"}, current, "", oci.ErrInvalidRequest},
		{"kvm with opt-in", RunscConfig{Platform: "kvm", AllowKVM: true}, current, "kvm", nil},
		{"unknown platform", RunscConfig{Platform: "systrap"}, old, "", oci.ErrInvalidRequest},
	} {
		got, err := RunscInfo{Platforms: tc.offered}.ChoosePlatform(tc.cfg)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: choosePlatform = %q, %v; want %q, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}
