package bench

import (
	"strings"
	"testing"
	"time"
)

func TestKernelMarkdownGoal(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x*float64(time.Millisecond)))
		}
		return d
	}
	for _, c := range []struct {
		cell, host, hostS []time.Duration
		want              string
	}{
		{ms(1.5, 1.4, 1.6), ms(60, 61, 59), ms(14, 15, 13), "**met**"},
		{ms(2.5, 2.4, 2.6), ms(60, 61, 59), ms(14, 15, 13), "**NOT met**"}, // over 2 ms
		{ms(1.5, 1.4, 1.6), ms(6, 6, 6), ms(5, 5, 5), "**NOT met**"},       // over 0.2x of 5 ms
	} {
		r := &KernelReport{Host0: c.host, HostS: c.hostS, Rows: []KernelRow{{Case: "cell", Samples: c.cell}}}
		if md := r.Markdown(); !strings.Contains(md, c.want) {
			t.Errorf("cell %v host %v / %v: want %s in\n%s", c.cell, c.host, c.hostS, c.want, md)
		}
	}
}
