package batch

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// MaxShards bounds N in --shard K/N: more shards than that is a typo, not a
// cluster (a Slurm array or an Indexed Job of 100,000 tasks each running
// a handful of programs would spend its time starting up).
const MaxShards = 100_000

// Shard is one share of a batch: shard Index of Count, 0 <= Index < Count,
// numbered from 0 as Slurm array task ids (--array=0-N-1) and the
// completion indexes of a Kubernetes Indexed Job are. The zero value (and
// any Count <= 1) is the whole batch.
//
// A line belongs to exactly one shard, decided by its key alone (its id;
// "line N" for a line without one): the same input and N always give the
// same shards, whatever the order of the lines or the machine, so a shard
// is rerun (and resumed from its results file) like any batch. The key's
// SHA-256 is placed with the jump consistent hash (Lamping and Veach, "A
// Fast, Minimal Memory, Consistent Hash Algorithm", 2014): going from N to
// N+1 shards moves only about 1/(N+1) of the lines, each to the new shard,
// so resharding is predictable (the results files of the old shards still
// hold most of their lines' results, but a rerun with the new N writes new
// files: resume is per results file).
type Shard struct {
	Index, Count int
}

// ParseShard parses "K/N" (0 <= K < N <= MaxShards).
func ParseShard(s string) (Shard, error) {
	k, n, ok := strings.Cut(s, "/")
	if !ok {
		return Shard{}, fmt.Errorf("shard %q: want K/N, e.g. 0/4 (shard K of N, counted from 0)", s)
	}
	ki, kerr := strconv.Atoi(strings.TrimSpace(k))
	ni, nerr := strconv.Atoi(strings.TrimSpace(n))
	switch {
	case kerr != nil || nerr != nil:
		return Shard{}, fmt.Errorf("shard %q: K and N must be integers (K/N, e.g. 0/4)", s)
	case ni < 1 || ni > MaxShards:
		return Shard{}, fmt.Errorf("shard %q: N must be between 1 and %d", s, MaxShards)
	case ki < 0 || ki >= ni:
		return Shard{}, fmt.Errorf("shard %q: K must be between 0 and N-1 = %d (shards count from 0, as Slurm array task ids and Indexed Job completion indexes do)", s, ni-1)
	}
	return Shard{Index: ki, Count: ni}, nil
}

func (s Shard) String() string {
	if s.Count <= 1 {
		return "0/1"
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Of is the shard (0..n-1) of n that a line's key belongs to.
func Of(key string, n int) int {
	if n <= 1 {
		return 0
	}
	sum := sha256.Sum256([]byte(key))
	return jump(binary.BigEndian.Uint64(sum[:8]), n)
}

// Has reports whether the line of key is in s.
func (s Shard) Has(key string) bool {
	return s.Count <= 1 || Of(key, s.Count) == s.Index
}

// Select is the jobs of s, in their order.
func (s Shard) Select(jobs []Job) []Job {
	if s.Count <= 1 {
		return jobs
	}
	var mine []Job
	for _, j := range jobs {
		if s.Has(j.key()) {
			mine = append(mine, j)
		}
	}
	return mine
}

// jump is the jump consistent hash of key into n buckets (Lamping and
// Veach 2014, their reference code).
func jump(key uint64, n int) int {
	var b, j int64 = -1, 0
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}
