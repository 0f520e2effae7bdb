package conformance

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestJudgesEveryLanguage (issue #42): through the real server, every
// language of the catalogue that has a Judge0 id runs its hello world
// (rootfs/testdata/programs) as a Judge0 /submissions?wait=true and is
// Accepted, and Piston's /api/v2/runtimes lists every language with its
// aliases. CI builds every layer; elsewhere an unbuilt language skips.
func TestJudgesEveryLanguage(t *testing.T) {
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	base := "http://" + addr
	hc := http.DefaultClient

	data, err := os.ReadFile("../rest/judge0_languages.json")
	if err != nil {
		t.Fatal(err)
	}
	var mapping struct {
		Languages []struct {
			ID       int    `json:"id"`
			Language string `json:"language"`
		} `json:"languages"`
	}
	if err := json.Unmarshal(data, &mapping); err != nil {
		t.Fatal(err)
	}
	judge0ID := map[string]int{} // the first (current) id of each language
	for _, e := range mapping.Languages {
		if _, ok := judge0ID[e.Language]; !ok {
			judge0ID[e.Language] = e.ID
		}
	}
	_, _, v := restCall(t, hc, "GET", base+"/languages", "", nil)
	served := map[int]bool{}
	list, _ := v.([]any)
	for _, e := range list {
		if id, ok := jsonObj(e)["id"].(float64); ok {
			served[int(id)] = true
		}
	}
	_, _, v = restCall(t, hc, "GET", base+"/api/v2/runtimes", "", nil)
	runtimes, _ := v.([]any)

	// The catalogue and what is built, as `sandcell languages --json` says.
	out, err := exec.Command(build(t, "sandcell"), "--layer-dir", layerDir(), "languages", "--json").Output()
	if err != nil {
		t.Fatalf("sandcell languages --json: %v", err)
	}
	var langs []struct {
		Name    string   `json:"language"`
		Aliases []string `json:"aliases"`
		Built   bool     `json:"built"`
	}
	if err := json.Unmarshal(out, &langs); err != nil || len(langs) < 50 {
		t.Fatalf("sandcell languages --json: %d languages, %v", len(langs), err)
	}
	for _, l := range langs {
		t.Run(l.Name, func(t *testing.T) {
			if !l.Built {
				if os.Getenv("CI") == "true" {
					t.Fatalf("language %s is not built (CI builds every language)", l.Name)
				}
				t.Skipf("language %s is not built here", l.Name)
			}
			// Piston: one runtime answers to the language's name (or, where
			// Piston gives the name to another runtime, to one of its
			// aliases: sh is Piston's bash, sandcell's sh is busybox) and
			// to every alias.
			i := slices.IndexFunc(runtimes, func(e any) bool {
				m := jsonObj(e)
				return m["language"] == l.Name || slices.Contains(l.Aliases, fmt.Sprint(m["language"]))
			})
			if i < 0 {
				i = slices.IndexFunc(runtimes, func(e any) bool { return slices.Contains(jsonObj(e)["aliases"].([]any), any(l.Name)) })
			}
			if i < 0 {
				t.Errorf("piston runtimes: no runtime for %s", l.Name)
			} else {
				rt := jsonObj(runtimes[i])
				for _, a := range l.Aliases {
					if rt["language"] != a && !slices.Contains(rt["aliases"].([]any), any(a)) {
						t.Errorf("piston runtime %v: alias %s of %s missing", rt, a, l.Name)
					}
				}
			}
			id, ok := judge0ID[l.Name]
			if !ok {
				return // Judge0 has no such language (python-data, dash, awk...)
			}
			if !served[id] {
				t.Fatalf("judge0 /languages does not list %d (%s)", id, l.Name)
			}
			m, _ := filepath.Glob(filepath.Join("..", "rootfs", "testdata", "programs", l.Name, "hello.*"))
			if len(m) != 1 {
				t.Fatalf("want one hello program of %s, found %v", l.Name, m)
			}
			src, err := os.ReadFile(m[0])
			if err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(map[string]any{"source_code": string(src), "language_id": id, "stdin": "world\n", "expected_output": "hello, world"})
			status, _, v := restCall(t, hc, "POST", base+"/submissions?wait=true&fields=stdout,stderr,compile_output,status,message", string(body), nil)
			got := jsonObj(v)
			if st := jsonObj(got["status"]); status != 201 || st["id"] != 3.0 || got["stdout"] != "hello, world\n" {
				t.Errorf("judge0 %d (%s) hello: HTTP %d %s", id, l.Name, status, fmt.Sprint(got))
			}
		})
	}
}
