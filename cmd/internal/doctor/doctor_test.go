package doctor

import (
	"strings"
	"testing"
)

// TestSlurmCheck: outside a job no note; inside one, the note names the
// job, the cgroups slurmd set (v1 and v2 layouts) and what follows for
// the sandboxes' cgroups.
func TestSlurmCheck(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if c, ok := SlurmCheck(env(nil), "0::/user.slice", "/sandcell"); ok {
		t.Errorf("outside Slurm: %+v", c)
	}
	for _, tc := range []struct {
		name, cgroup string
		env          map[string]string
		want         []string
	}{
		{"v1 array task", "6:freezer:/slurm_node1/uid_0/job_12/step_batch\n4:memory:/\n0::/",
			map[string]string{"SLURM_JOB_ID": "12", "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "2", "SLURM_CPUS_PER_TASK": "4"},
			[]string{"job 12 (array 10, task 2)", "freezer:/slurm_node1/uid_0/job_12/step_batch set by slurmd", "--cgroup-parent /sandcell, outside the job's", "(4 CPUs)"}},
		{"v2", "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0",
			map[string]string{"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": "2"},
			[]string{"job 7, in cgroup :/system.slice/slurmstepd.scope/job_7/step_0/user/task_0 set by slurmd", "(2 CPUs)"}},
		{"linuxproc", "0::/\n3:cpu:/",
			map[string]string{"SLURM_JOB_ID": "3"},
			[]string{"job 3, no cgroup set by slurmd", "the job's allocation"}},
	} {
		c, ok := SlurmCheck(env(tc.env), tc.cgroup, "/sandcell")
		if !ok || c.Name != "slurm" || !c.OK || c.Required {
			t.Errorf("%s: %+v, %v; want an ok, optional slurm note", tc.name, c, ok)
		}
		for _, w := range tc.want {
			if !strings.Contains(c.Detail, w) {
				t.Errorf("%s: detail %q lacks %q", tc.name, c.Detail, w)
			}
		}
	}
}
