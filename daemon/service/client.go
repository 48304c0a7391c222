package service

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/kprofd/kprofd/daemon"
)

// DefaultSocket is where `kprofd serve` listens by default.
const DefaultSocket = "/run/kprofd/kprofd.sock"

// Client runs sessions through the daemon's socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client of the daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{socket: socket, http: &http.Client{Transport: tr}}
}

// url names a path of the API; the host is a placeholder (the transport
// dials the socket).
func (c *Client) url(path string) string { return "http://kprofd" + APIVersion + path }

// Run has the daemon run the session and feeds its stream to h (Prepared
// is not called: the plan stays in the daemon) until the session ends,
// and returns its end. When ctx is done (Ctrl-C) it asks the daemon to
// stop the session and goes on until the profile so far comes.
func (c *Client) Run(ctx context.Context, req *Request, h Hooks) (*End, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	// The stream's request outlives ctx once the session has started:
	// stopping is then a request of its own, after which the stream
	// still brings the profile so far. Before that, ctx's end drops the
	// request, which ends the session at the daemon.
	post, dropPost := context.WithCancel(context.Background())
	defer dropPost()
	var mu sync.Mutex
	var id string
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		select {
		case <-ctx.Done():
		case <-ended:
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if id == "" {
			dropPost()
			return
		}
		c.stop(id)
	}()
	hreq, err := http.NewRequestWithContext(post, http.MethodPost, c.url("/sessions"), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.New("interrupted before the session started")
		}
		return nil, fmt.Errorf("reaching kprofd serve at %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, apiError(resp)
	}
	mu.Lock()
	id = resp.Header.Get("Kprofd-Session")
	mu.Unlock()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<30) // the last line holds the profile
	for sc.Scan() {
		var m Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("reading the daemon's answer: %w", err)
		}
		switch m.Type {
		case MsgStarted:
			if h.Started != nil && m.Started != nil {
				h.Started(*m.Started)
			}
		case MsgProgress:
			if h.Progress != nil && m.Progress != nil {
				h.Progress(*m.Progress)
			}
		case MsgWarning:
			if h.Warn != nil {
				h.Warn(m.Text)
			}
		case MsgDemotion:
			if h.Demoted != nil && m.Demotion != nil {
				h.Demoted(*m.Demotion)
			}
		case MsgStopping:
			if h.Stopping != nil {
				h.Stopping(m.Text)
			}
		case MsgEnd:
			if m.End == nil {
				return nil, errors.New("the daemon sent an empty end")
			}
			return m.End, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the daemon's answer: %w", err)
	}
	return nil, errors.New("the daemon closed the connection before the session ended")
}

// stop asks the daemon to stop session id.
func (c *Client) stop(id string) {
	resp, err := c.http.Post(c.url("/sessions/"+id+"/stop"), "application/json", nil)
	if err == nil {
		resp.Body.Close()
	}
}

// apiError turns an error answer into an error.
func apiError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e APIError
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		if e.Field != "" {
			return &daemon.ConfigError{Field: e.Field, Err: errors.New(e.Error)}
		}
		return errors.New(e.Error)
	}
	return fmt.Errorf("the daemon answered %s", resp.Status)
}
