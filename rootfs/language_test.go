package rootfs

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	tests := []struct {
		name string
		want string // "" means ErrUnknownLanguage
	}{
		{"python", "python"},
		{"py", "python"},
		{"python3", "python"},
		{"PYTHON", "python"},
		{" Py\n", "python"},
		{"sh", "sh"},
		{"busybox", "sh"},
		{"ash", "sh"},
		{"SH", "sh"},
		{"bash", ""}, // busybox sh is not bash: do not pretend it is
		{"ruby", ""},
		{"", ""},
		{"../python", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Lookup(tt.name)
			if tt.want == "" {
				if !errors.Is(err, ErrUnknownLanguage) {
					t.Fatalf("Lookup(%q) error = %v, want ErrUnknownLanguage", tt.name, err)
				}
				if !strings.Contains(err.Error(), "python") {
					t.Errorf("Lookup(%q) error %q does not list the known languages", tt.name, err)
				}
				return
			}
			if err != nil || got.Name != tt.want {
				t.Fatalf("Lookup(%q) = %q, %v; want %q", tt.name, got.Name, err, tt.want)
			}
		})
	}
}

func TestLookupReturnsCopy(t *testing.T) {
	l, err := Lookup("python")
	if err != nil {
		t.Fatal(err)
	}
	l.Run[0] = "/bin/false"
	l.Aliases[0] = "changed"
	l.Setup[0][0] = "/bin/false"
	Languages()[0].Env[0] = "X=1"
	again, _ := Lookup("python")
	if again.Run[0] != "/usr/bin/python3" || again.Aliases[0] == "changed" ||
		again.Setup[0][0] == "/bin/false" || again.Env[0] == "X=1" {
		t.Errorf("changing a returned Language changed the catalogue: %+v", again)
	}
}

func TestCatalogue(t *testing.T) {
	c, err := parseCatalogue(languagesJSON)
	if err != nil {
		t.Fatalf("languages.json: %v", err)
	}
	if len(Languages()) != len(c.Languages) {
		t.Errorf("Languages() has %d entries, languages.json %d", len(Languages()), len(c.Languages))
	}
	for _, l := range c.Languages {
		t.Run(l.Name, func(t *testing.T) {
			if len(l.Run) == 0 || l.Source == "" || len(l.Packages) == 0 || len(l.Version) == 0 {
				t.Fatalf("incomplete: %+v", l)
			}
			if !slices.Contains(l.Run, "/work/"+l.Source) {
				t.Errorf("run %q does not name the source /work/%s", l.Run, l.Source)
			}
			for _, n := range append([]string{l.Name}, l.Aliases...) {
				if got, err := Lookup(n); err != nil || got.Name != l.Name {
					t.Errorf("Lookup(%q) = %q, %v; want %q", n, got.Name, err, l.Name)
				}
			}
		})
	}
}

func TestParseCatalogueRejects(t *testing.T) {
	const good = `{"name":"x","aliases":[],"packages":["pkg"],"source":"main.x","run":["/x","/work/main.x"],"version":["/x"],"env":[],"setup":[]}`
	if _, err := parseCatalogue([]byte(`{"suite":"bookworm","languages":[` + good + `]}`)); err != nil {
		t.Fatalf("good catalogue rejected: %v", err)
	}
	tests := map[string]string{
		"unknown field":   `{"suite":"bookworm","languages":[` + good + `],"extra":1}`,
		"no languages":    `{"suite":"bookworm","languages":[]}`,
		"bad suite":       `{"suite":"../x","languages":[` + good + `]}`,
		"bad name":        `{"suite":"bookworm","languages":[` + strings.Replace(good, `"x"`, `"../x"`, 1) + `]}`,
		"upper name":      `{"suite":"bookworm","languages":[` + strings.Replace(good, `"x"`, `"X"`, 1) + `]}`,
		"duplicate":       `{"suite":"bookworm","languages":[` + good + `,` + good + `]}`,
		"alias clash":     `{"suite":"bookworm","languages":[` + good + `,` + strings.Replace(strings.Replace(good, `"x"`, `"y"`, 1), `[]`, `["x"]`, 1) + `]}`,
		"source path":     `{"suite":"bookworm","languages":[` + strings.Replace(good, `"main.x"`, `"a/main.x"`, 1) + `]}`,
		"relative run":    `{"suite":"bookworm","languages":[` + strings.Replace(good, `"run":["/x"`, `"run":["x"`, 1) + `]}`,
		"no packages":     `{"suite":"bookworm","languages":[` + strings.Replace(good, `["pkg"]`, `[]`, 1) + `]}`,
		"bad package":     `{"suite":"bookworm","languages":[` + strings.Replace(good, `["pkg"]`, `["pkg x"]`, 1) + `]}`,
		"bad env":         `{"suite":"bookworm","languages":[` + strings.Replace(good, `"env":[]`, `"env":["NOEQUALS"]`, 1) + `]}`,
		"relative setup":  `{"suite":"bookworm","languages":[` + strings.Replace(good, `"setup":[]`, `"setup":[["sh"]]`, 1) + `]}`,
		"trailing data":   `{"suite":"bookworm","languages":[` + good + `]} {}`,
		"not json":        `suite: bookworm`,
		"empty setup cmd": `{"suite":"bookworm","languages":[` + strings.Replace(good, `"setup":[]`, `"setup":[[]]`, 1) + `]}`,
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := parseCatalogue([]byte(data)); err == nil {
				t.Errorf("parseCatalogue(%s) = nil error, want an error", data)
			}
		})
	}
}
