package service

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// stream writes a session's messages, one JSON object per line, each
// flushed at once. Messages before the answer's header (warnings while
// preparing) wait for it: the status is only known once the probes are
// in or the session failed. Each message must be written within timeout:
// a client that stops reading ends its session (broken), rather than
// hold it.
type stream struct {
	w       http.ResponseWriter
	id      string
	timeout time.Duration
	broken  func()

	mu      sync.Mutex
	started bool
	held    []Message
	gone    bool // the client is gone
}

func (st *stream) send(m Message) {
	st.mu.Lock()
	defer st.mu.Unlock()
	m.Session = st.id
	if !st.started {
		st.held = append(st.held, m)
		return
	}
	st.write(m)
}

func (st *stream) write(m Message) {
	if st.gone {
		return
	}
	rc := http.NewResponseController(st.w)
	rc.SetWriteDeadline(time.Now().Add(st.timeout))
	err := json.NewEncoder(st.w).Encode(m)
	if err == nil {
		err = rc.Flush()
	}
	if err != nil {
		st.gone = true
		if st.broken != nil {
			st.broken()
		}
	}
}

// start sends the header and the held messages.
func (st *stream) start() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.started {
		return
	}
	st.started = true
	st.w.Header().Set("Content-Type", "application/x-ndjson")
	st.w.Header().Set("Kprofd-Session", st.id)
	st.w.WriteHeader(http.StatusOK)
	for _, m := range st.held {
		st.write(m)
	}
	st.held = nil
}

func (st *stream) isStarted() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.started
}
