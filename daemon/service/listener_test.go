package service

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestListenerCaps: connections over the cap are answered 429 with the
// reason and closed; one closed frees its place.
func TestListenerCaps(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits()
	lim.Conns = 2
	l := NewListener(ln, lim, nil)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		ConnState: l.ConnState, ReadHeaderTimeout: time.Minute}
	go hs.Serve(l)
	defer hs.Close()
	get := func(c net.Conn) string {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		b := make([]byte, 4096)
		n, _ := c.Read(b)
		return string(b[:n])
	}
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if a := get(c); !strings.HasPrefix(a, "HTTP/1.1 200") {
			t.Fatalf("within the cap: %q", a)
		}
		held = append(held, c)
	}
	over, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if a := get(over); !strings.HasPrefix(a, "HTTP/1.1 429") || !strings.Contains(a, "the daemon holds 2 connections already, its limit (kprofd serve --max-conns)") {
		t.Errorf("over the cap: %q", a)
	}
	held[0].Close()
	// The place is free once the server has seen the close.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		a := get(c)
		c.Close()
		if strings.HasPrefix(a, "HTTP/1.1 200") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed connection's place is not freed: %q", a)
		}
	}
	// CloseIdle closes the held connection, idle between requests.
	l.CloseIdle()
	held[1].SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := held[1].Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("an idle connection is still open after CloseIdle: %d, %v", n, err)
	}
}
