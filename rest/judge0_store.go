package rest

import (
	"crypto/rand"
	"fmt"
	"sync"
	"time"
)

// submission is one Judge0 submission: its checked input and, once run,
// its outcome. Its mutable fields are guarded by the store's lock.
type submission struct {
	token   string
	in      *judge0Input
	created time.Time

	st   submissionState
	size int64 // bytes held: input and outcome
}

// submissionState is what a run changes.
type submissionState struct {
	judge0Outcome
	finished time.Time
}

func newSubmission(in *judge0Input) *submission {
	s := &submission{token: newToken(), in: in, created: time.Now(), size: in.size()}
	s.st.status = statusQueue
	return s
}

// newToken is a random UUID (version 4), as Judge0's SecureRandom.uuid.
func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// store holds the submissions in memory, bounded: at most max of them
// holding at most maxBytes, each kept ttl once finished. Nothing of it
// survives a restart; a client that asks for an expired or evicted token
// gets 404, as for one that never was.
type store struct {
	mu       sync.Mutex
	subs     map[string]*submission
	bytes    int64
	max      int
	maxBytes int64
	ttl      time.Duration
	now      func() time.Time
}

func newStore(maxSubs int, maxBytes int64, ttl time.Duration) *store {
	if maxSubs <= 0 {
		maxSubs = 1000
	}
	if maxBytes <= 0 {
		maxBytes = 256 << 20
	}
	if ttl <= 0 {
		ttl = time.Hour
	}
	return &store{subs: map[string]*submission{}, max: maxSubs, maxBytes: maxBytes, ttl: ttl, now: time.Now}
}

// add stores a new submission. Expired ones are dropped first; then, while
// it would not fit, the oldest finished one. If it still does not fit (the
// others are all waiting or running), it is refused: errQueueFull.
func (s *store) add(sub *submission) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for t, o := range s.subs {
		if s.expired(o, now) {
			s.dropLocked(t)
		}
	}
	for len(s.subs) >= s.max || s.bytes+sub.size > s.maxBytes {
		var oldest *submission
		for _, o := range s.subs {
			if !o.st.finished.IsZero() && (oldest == nil || o.st.finished.Before(oldest.st.finished)) {
				oldest = o
			}
		}
		if oldest == nil {
			return errQueueFull
		}
		s.dropLocked(oldest.token)
	}
	s.subs[sub.token] = sub
	s.bytes += sub.size
	return nil
}

func (s *store) expired(o *submission, now time.Time) bool {
	return !o.st.finished.IsZero() && now.Sub(o.st.finished) > s.ttl
}

func (s *store) dropLocked(token string) {
	if o := s.subs[token]; o != nil {
		s.bytes -= o.size
		delete(s.subs, token)
	}
}

// get is the submission of a token, nil if unknown or expired.
func (s *store) get(token string) *submission {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.subs[token]
	if o == nil || s.expired(o, s.now()) {
		return nil
	}
	return o
}

func (s *store) remove(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(token)
}

func (s *store) setStatus(sub *submission, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub.st.status = status
}

// finish records a run's outcome and counts its output's bytes.
func (s *store) finish(sub *submission, o judge0Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub.st.judge0Outcome = o
	sub.st.finished = s.now()
	var n int64
	for _, t := range []*string{o.stdout, o.stderr, o.compileOutput, o.message} {
		if t != nil {
			n += int64(len(*t))
		}
	}
	if _, stored := s.subs[sub.token]; stored {
		s.bytes += n
	}
	sub.size += n
}

// snapshot is a submission's state, for rendering outside the lock.
func (s *store) snapshot(sub *submission) submissionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sub.st
}

// pending counts the submissions not finished by status (In Queue,
// Processing).
func (s *store) pending() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]int{}
	for _, o := range s.subs {
		if o.st.finished.IsZero() {
			out[o.st.status]++
		}
	}
	return out
}

// held is the bytes the submissions hold.
func (s *store) held() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}
