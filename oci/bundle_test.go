package oci

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The bundle's config.json is exactly the spec the in-process runtime runs.
func TestWriteBundleRoundTrip(t *testing.T) {
	req, host := goldenRequest()
	s, err := Spec(req, host)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := WriteBundle(dir, s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back specs.Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, s) {
		t.Error("config.json differs from the spec it was written from")
	}
	s.Root.Path = "relative"
	if err := WriteBundle(dir, s); err == nil {
		t.Error("WriteBundle accepted a relative root path")
	}
}
