package demo

import "sync"

// idSet is a set of record ids, safe for concurrent use (the zero value is empty).
type idSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (s *idSet) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]bool{}
	}
	s.ids[id] = true
}

func (s *idSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

func (s *idSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// distinctSent is how many distinct records the sends from source delivered to the target
// queue. The reconciler's metrics (GapsDetected, GapsReplayed) count per pass; this counts
// records, from what reached the queue.
func distinctSent(sends []send, source string) int {
	ids := map[string]bool{}
	for _, s := range sends {
		if s.source == source {
			ids[s.id] = true
		}
	}
	return len(ids)
}
