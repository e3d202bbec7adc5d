package demo

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProcessRSS is the resident memory of one process of the run (this one and every process it
// started: emulators, runtime interface emulators, bootstraps), read from /proc/<pid>/status.
type ProcessRSS struct {
	PID  int    `json:"pid"`
	Name string `json:"name"`
	// FirstKB is the first sample; SteadyKB the first sample after a quarter of the process's
	// observed lifetime (past start-up and the first batches); LastKB the last; MaxKB the peak.
	FirstKB  int64   `json:"first_kb"`
	SteadyKB int64   `json:"steady_kb"`
	LastKB   int64   `json:"last_kb"`
	MaxKB    int64   `json:"max_kb"`
	Seconds  float64 `json:"observed_seconds"`
	Samples  int     `json:"samples"`
	// Flat: LastKB is within 25% (plus 16 MB of slack) of SteadyKB.
	Flat bool `json:"flat"`
}

type rssPoint struct {
	at time.Duration
	kb int64
}

type procTrack struct {
	name   string
	points []rssPoint
}

// rssTracker samples the RSS of this process and its descendants at most every interval.
type rssTracker struct {
	mu       sync.Mutex
	procs    map[int]*procTrack
	last     time.Duration
	interval time.Duration
	sampled  bool
}

func newRSSTracker() *rssTracker {
	return &rssTracker{procs: map[int]*procTrack{}, interval: 5 * time.Second}
}

func (t *rssTracker) sample(at time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sampled && at-t.last < t.interval {
		return
	}
	t.sampled, t.last = true, at
	self := os.Getpid()
	for _, pid := range append(descendants(self), self) {
		name, kb, ok := readStatus(pid)
		if !ok {
			continue
		}
		p := t.procs[pid]
		if p == nil {
			p = &procTrack{name: name}
			t.procs[pid] = p
		}
		p.points = append(p.points, rssPoint{at, kb})
	}
}

func (t *rssTracker) report() []ProcessRSS {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []ProcessRSS
	for pid, p := range t.procs {
		if len(p.points) == 0 {
			continue
		}
		first, last := p.points[0], p.points[len(p.points)-1]
		steady := first
		quarter := first.at + (last.at-first.at)/4
		for _, pt := range p.points {
			if pt.at >= quarter {
				steady = pt
				break
			}
		}
		r := ProcessRSS{PID: pid, Name: p.name, FirstKB: first.kb, SteadyKB: steady.kb, LastKB: last.kb,
			Seconds: (last.at - first.at).Seconds(), Samples: len(p.points)}
		for _, pt := range p.points {
			r.MaxKB = max(r.MaxKB, pt.kb)
		}
		r.Flat = float64(r.LastKB) <= 1.25*float64(r.SteadyKB)+16*1024
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].PID < out[j].PID
	})
	return out
}

// descendants lists the processes below root, from /proc/<pid>/stat's ppid field.
func descendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses: cut at the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// readStatus returns the process name and VmRSS (kB) from /proc/<pid>/status.
func readStatus(pid int) (string, int64, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return "", 0, false
	}
	var name string
	var kb int64 = -1
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "Name":
			name = strings.TrimSpace(v)
		case "VmRSS":
			f := strings.Fields(v)
			if len(f) >= 1 {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					kb = n
				}
			}
		}
	}
	if kb < 0 { // a zombie or a kernel thread
		return "", 0, false
	}
	return name, kb, true
}
