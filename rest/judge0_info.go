package rest

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/limits"
)

// Judge0's information endpoints (v1.13.1: config/routes.rb,
// app/controllers/info_controller.rb, health_controller.rb,
// app/helpers/config.rb, docs/api/information, system_and_configuration,
// health_check, statistics), with what sandcell really has and does.

// judge0Version is the Judge0 API version served: /about and /version say
// it, as clients (the official Python SDK) pick their language ids by it.
const judge0Version = "1.13.1"

// judge0Conf is Judge0's configuration as sandcell applies it: the
// defaults of v1.13.1's judge0.conf (app/helpers/config.rb) for what a
// submission does not ask, and its MAX_* ceilings, lowered to the
// server's ceilings where those are lower. Seconds, KB and counts.
type judge0Conf struct {
	cpu, maxCPU, extra, maxExtra, wall, maxWall float64
	mem, maxMem, stack, maxStack                int64
	procs, maxProcs, fsize, maxFsize            int64
}

func newJudge0Conf(c limits.Set) judge0Conf {
	k := judge0Conf{
		cpu: 5, maxCPU: min(15, c.CPUTime.Seconds()), extra: 1, maxExtra: judge0MaxExtraTime,
		wall: 10, maxWall: min(20, c.Timeout.Seconds()),
		mem: 128000, maxMem: min(512000, c.MemoryBytes>>10), stack: 64000, maxStack: min(128000, c.MemoryBytes>>10),
		procs: 60, maxProcs: min(120, c.Pids), fsize: 1024, maxFsize: min(4096, c.FileBytes>>10),
	}
	k.cpu, k.wall = min(k.cpu, k.maxCPU), min(k.wall, k.maxWall)
	k.mem, k.stack, k.procs, k.fsize = min(k.mem, k.maxMem), min(k.stack, k.maxStack), min(k.procs, k.maxProcs), min(k.fsize, k.maxFsize)
	return k
}

// judge0MaxExtractKB bounds additional_files unpacked (MAX_EXTRACT_SIZE).
const judge0MaxExtractKB = 10240

// judge0Stats count the submissions since the server started (Judge0
// counts those in its database; sandcell has none).
type judge0Stats struct {
	mu       sync.Mutex
	byLang   map[int]int
	byStatus map[int]int
	byDay    map[string]int // "2006-01-02", UTC
	total    int
}

func (s *judge0Stats) created(langID int, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byLang == nil {
		s.byLang, s.byStatus, s.byDay = map[int]int{}, map[int]int{}, map[string]int{}
	}
	s.total++
	s.byLang[langID]++
	s.byDay[at.UTC().Format(time.DateOnly)]++
}

func (s *judge0Stats) finished(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byStatus == nil {
		s.byStatus = map[int]int{}
	}
	s.byStatus[status]++
}

func (j *judge0) infoRoutes() {
	m := j.h.mux
	m.HandleFunc("GET /config_info", j.configInfo)
	m.HandleFunc("GET /about", j.about)
	m.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, judge0Version)
	})
	m.HandleFunc("GET /system_info", j.systemInfo)
	m.HandleFunc("GET /workers", j.workers)
	m.HandleFunc("GET /statistics", j.statistics)
	m.HandleFunc("GET /languages/all", j.allLanguages)
}

// configInfo is GET /config_info: Config.config_info's keys, with the
// values sandcell applies.
func (j *judge0) configInfo(w http.ResponseWriter, r *http.Request) {
	k := j.conf
	writeJSON(w, http.StatusOK, map[string]any{
		"maintenance_mode":                                 false,
		"enable_wait_result":                               true,
		"enable_compiler_options":                          true,
		"allowed_languages_for_compile_options":            []string{},
		"enable_command_line_arguments":                    true,
		"enable_submission_delete":                         false,
		"enable_callbacks":                                 j.callbacks != nil,
		"callbacks_max_tries":                              judge0CallbackTries,
		"callbacks_timeout":                                judge0CallbackTimeout.Seconds(),
		"enable_additional_files":                          true,
		"max_queue_size":                                   cap(j.queue),
		"cpu_time_limit":                                   k.cpu,
		"max_cpu_time_limit":                               k.maxCPU,
		"cpu_extra_time":                                   k.extra,
		"max_cpu_extra_time":                               k.maxExtra,
		"wall_time_limit":                                  k.wall,
		"max_wall_time_limit":                              k.maxWall,
		"memory_limit":                                     k.mem,
		"max_memory_limit":                                 k.maxMem,
		"stack_limit":                                      k.stack,
		"max_stack_limit":                                  k.maxStack,
		"max_processes_and_or_threads":                     k.procs,
		"max_max_processes_and_or_threads":                 k.maxProcs,
		"enable_per_process_and_thread_time_limit":         false,
		"allow_enable_per_process_and_thread_time_limit":   false,
		"enable_per_process_and_thread_memory_limit":       false,
		"allow_enable_per_process_and_thread_memory_limit": false,
		"max_file_size":                                    k.fsize,
		"max_max_file_size":                                k.maxFsize,
		"number_of_runs":                                   1,
		"max_number_of_runs":                               judge0MaxRuns,
		"redirect_stderr_to_stdout":                        false,
		"max_extract_size":                                 judge0MaxExtractKB,
		"enable_batched_submissions":                       true,
		"max_submission_batch_size":                        judge0MaxBatch,
		"submission_cache_duration":                        0.0, // every GET reads the submission as it is
		"use_docs_as_homepage":                             false,
		"allow_enable_network":                             len(j.h.opts.NetworkAllow) > 0,
		"enable_network":                                   false,
	})
}

// about is GET /about: Judge0's keys; the version is the API's, the rest
// sandcell's.
func (j *judge0) about(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"version":     judge0Version,
		"homepage":    "https://github.com/sandcell/sandcell",
		"source_code": "https://github.com/sandcell/sandcell",
		"maintainer":  "sandcell (the Judge0 CE " + judge0Version + " API, served by sandcell's rest package)",
	})
}

// systemInfo is GET /system_info: what Judge0 reads from lscpu and free
// -h, here from the Go runtime and /proc.
func (j *judge0) systemInfo(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"Architecture": runtimeArch(), "CPU(s)": strconv.Itoa(runtime.NumCPU())}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				out["Model name"] = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ":")
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "MemTotal":
				out["Mem"] = humanKB(kb)
			case "SwapTotal":
				out["Swap"] = humanKB(kb)
			}
		}
		f.Close()
	}
	writeJSON(w, http.StatusOK, out)
}

func runtimeArch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return runtime.GOARCH
}

// humanKB is a size as free -h writes it ("15Gi", "512Mi").
func humanKB(kb int64) string {
	v, units := float64(kb), []string{"Ki", "Mi", "Gi", "Ti"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 1, 64) + units[i]
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + units[i]
}

// workers is GET /workers: Judge0's one queue, with sandcell's workers.
func (j *judge0) workers(w http.ResponseWriter, r *http.Request) {
	n := int(j.busy.Load())
	writeJSON(w, http.StatusOK, []map[string]any{{
		"queue": judge0Version, "size": len(j.queue), "available": j.nWorkers,
		"idle": j.nWorkers - n, "working": n, "paused": 0, "failed": int(j.failed.Load()),
	}})
}

// statistics is GET /statistics: Judge0's shape, counted since the
// server started (nothing is cached: cached_until is now); the
// "database" is the submissions held in memory.
func (j *judge0) statistics(w http.ResponseWriter, r *http.Request) {
	now := time.Now().UTC()
	names := map[int]string{}
	for _, e := range j.listed(true) {
		names[e.ID] = e.Name
	}
	s := &j.stats
	s.mu.Lock()
	type count struct {
		key   map[string]any
		count int
	}
	var langs, statuses []count
	for id, n := range s.byLang {
		langs = append(langs, count{map[string]any{"id": id, "name": orNil(names[id])}, n})
	}
	byStatus := map[int]int{}
	for id, n := range s.byStatus {
		byStatus[id] = n
	}
	today := now.Format(time.DateOnly)
	days := map[string]int{}
	for d := 1; d <= 30; d++ {
		day := now.AddDate(0, 0, -d).Format(time.DateOnly)
		days[day] = s.byDay[day]
	}
	total, todayN := s.total, s.byDay[today]
	s.mu.Unlock()
	for st, n := range j.store.pending() {
		byStatus[st] += n
	}
	for id, n := range byStatus {
		statuses = append(statuses, count{map[string]any{"id": id, "name": judge0Statuses[id-1]}, n})
	}
	render := func(cs []count, key string) []map[string]any {
		slices.SortStableFunc(cs, func(a, b count) int { return b.count - a.count })
		out := []map[string]any{}
		for _, c := range cs {
			out = append(out, map[string]any{key: c.key, "count": c.count})
		}
		return out
	}
	bytes := j.store.held()
	writeJSON(w, http.StatusOK, map[string]any{
		"created_at": now.Format(time.RFC3339Nano), "cached_until": now.Format(time.RFC3339Nano),
		"submissions": map[string]any{"total": total, "today": todayN, "last_30_days": days},
		"languages":   render(langs, "language"),
		"statuses":    render(statuses, "status"),
		"database":    map[string]any{"size_pretty": humanBytes(bytes), "size_in_bytes": bytes},
	})
}

func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// humanBytes is a size as Postgres' pg_size_pretty writes it.
func humanBytes(n int64) string {
	for _, u := range []struct {
		unit string
		size int64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}} {
		if n >= 10*u.size {
			return fmt.Sprintf("%d %s", n/u.size, u.unit)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// judge0Listed is a language id as the lists show it.
type judge0Listed struct {
	ID         int    `json:"id"`
	Name       string `json:"name"`
	IsArchived bool   `json:"is_archived"`
}

// listed are the ids of the built languages sorted by name: the active
// ones, and with archived the older ids too.
func (j *judge0) listed(archived bool) []judge0Listed {
	langs, err := j.h.languages()
	if err != nil {
		return nil
	}
	var out []judge0Listed
	for _, e := range judge0Langs {
		for _, l := range langs {
			if l.Name != e.Language {
				continue
			}
			name := judge0Language{entry: e, lang: l}.name()
			out = append(out, judge0Listed{e.ID, name, false})
			if archived {
				for _, id := range e.Also {
					out = append(out, judge0Listed{id, name, true})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b judge0Listed) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return a.ID - b.ID
	})
	return out
}

// allLanguages is GET /languages/all: active and archived ids.
func (j *judge0) allLanguages(w http.ResponseWriter, r *http.Request) {
	if _, err := j.h.languages(); err != nil {
		judge0Error(w, http.StatusInternalServerError, "listing the languages failed: "+err.Error())
		return
	}
	out := j.listed(true)
	if out == nil {
		out = []judge0Listed{}
	}
	writeJSON(w, http.StatusOK, out)
}
