package backend

import (
	"slices"
	"testing"
	"time"
)

func TestDemandTarget(t *testing.T) {
	const idle = time.Minute
	t0 := time.Unix(1_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		at      time.Duration
		op      string // "acquire", "release" or "" (just look)
		want    int    // target after the step
		wantAct bool
	}
	cases := []struct {
		name  string
		size  int
		steps []step
	}{
		{"one request is no demand", 4, []step{
			{0, "acquire", 0, true}, {time.Second, "release", 0, true}, {2 * idle, "", 0, false},
		}},
		{"a second request sets a target", 4, []step{
			{0, "acquire", 0, true}, {time.Second, "release", 0, true},
			{2 * time.Second, "acquire", 1, true}, {3 * time.Second, "release", 1, true},
		}},
		{"concurrency sets the target", 4, []step{
			{0, "acquire", 0, true}, {1, "acquire", 2, true}, {2, "acquire", 3, true},
			{3, "release", 3, true}, {4, "release", 3, true}, {5, "release", 3, true},
		}},
		{"capped by size", 2, []step{
			{0, "acquire", 0, true}, {1, "acquire", 2, true}, {2, "acquire", 2, true},
		}},
		{"idle shrinks to zero", 4, []step{
			{0, "acquire", 0, true}, {1, "release", 0, true}, {2, "acquire", 1, true}, {3, "release", 1, true},
			{idle - time.Second, "", 1, true}, {idle + 3, "", 0, false},
		}},
		{"a past burst fades after two windows", 4, []step{
			{0, "acquire", 0, true}, {1, "acquire", 2, true}, {2, "acquire", 3, true},
			{3, "release", 3, true}, {4, "release", 3, true}, {5, "release", 3, true},
			// steady single requests: the burst counts one more window
			{idle + time.Second, "acquire", 3, true}, {idle + 2*time.Second, "release", 3, true},
			{2*idle + 2*time.Second, "acquire", 1, true}, {2*idle + 3*time.Second, "release", 1, true},
			{2*idle + 4*time.Second, "acquire", 1, true}, {2*idle + 5*time.Second, "release", 1, true},
		}},
		{"a run longer than idle stays active", 4, []step{
			{0, "acquire", 0, true}, {3 * idle, "", 0, true}, {3*idle + 1, "release", 0, false},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var d demand
			for i, s := range tc.steps {
				switch s.op {
				case "acquire":
					d.acquire(at(s.at), idle)
				case "release":
					d.release(at(s.at), idle)
				}
				if got := d.target(at(s.at), idle, tc.size); got != s.want {
					t.Errorf("step %d (%s at %v): target %d, want %d", i, s.op, s.at, got, s.want)
				}
				if got := d.active(at(s.at), idle); got != s.wantAct {
					t.Errorf("step %d (%s at %v): active %v, want %v", i, s.op, s.at, got, s.wantAct)
				}
			}
		})
	}
}

func TestLauncherLine(t *testing.T) {
	cases := []struct {
		argv []string
		want string
	}{
		{[]string{"/bin/true"}, "'/bin/true'\n"},
		{[]string{"/x", "it's", ""}, `'/x' 'it'\''s' ''` + "\n"},
		{[]string{"/x", "a\nb", "$HOME `id` \\"}, `'/x' 'a'"$n"'b' '$HOME ` + "`id`" + ` \'` + "\n"},
	}
	for _, tc := range cases {
		if got := launcherLine(tc.argv); got != tc.want {
			t.Errorf("launcherLine(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}

func TestLauncherEnv(t *testing.T) {
	cases := []struct {
		in     []string
		want   []string
		wantOK bool
	}{
		{[]string{"HOME=/work", "A=1"}, []string{"HOME=/work", "A=1"}, true},
		{[]string{"A=1", "HOME=/work", "A=2", "B="}, []string{"HOME=/work", "A=2", "B="}, true},
		{[]string{"A=1"}, nil, false},                 // runc adds HOME
		{[]string{"HOME=/work", "HOME="}, nil, false}, // runc replaces an empty HOME
	}
	for _, tc := range cases {
		got, ok := launcherEnv(tc.in)
		if ok != tc.wantOK || (ok && !slices.Equal(got, tc.want)) {
			t.Errorf("launcherEnv(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
}
