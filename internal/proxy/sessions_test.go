package proxy

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSessionsAndKill: the session list shows a running statement, an open
// transaction and idle sessions with their user, listener and backend
// node; KillSession with queryOnly interrupts the statement and leaves the
// session, without it closes the session; an unknown id is ErrNoSession.
func TestSessionsAndKill(t *testing.T) {
	h := newHarness(t, nil)
	addr := h.srv.ListenerAddr("rw")
	dial := func() *rawConn {
		rc, err := dialRaw(t, addr, h.c.AppUser, h.c.AppPassword, "", 0, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		return rc
	}
	a, b, c := dial(), dial(), dial()
	b.query("BEGIN")
	b.query("SELECT 1")
	c.query("SELECT 1")
	aDone := sleeper(a, 30)
	waitRunning(t, h, "SELECT SLEEP(30)")
	byID := func() map[string]SessionInfo {
		out := map[string]SessionInfo{}
		for _, s := range h.srv.Sessions() {
			out[s.ID] = s
		}
		return out
	}
	id := func(rc *rawConn) string { return strconv.FormatUint(uint64(rc.greeting.ConnectionID), 10) }
	list := byID()
	sa, sb, sc := list[id(a)], list[id(b)], list[id(c)]
	if sa.State != SessionQuery || sa.CurrentStatement != "SELECT SLEEP(30)" || sa.User != h.c.AppUser || sa.Listener != "rw" ||
		sa.BackendNode != "node1" || sa.ClientAddr == "" {
		t.Errorf("running session: %+v", sa)
	}
	if sb.State != SessionInTransaction || !sb.InTransaction || sb.CurrentStatement != "" {
		t.Errorf("session in a transaction: %+v", sb)
	}
	if sc.State != SessionIdle || sc.InTransaction || sc.AgeS <= 0 {
		t.Errorf("idle session: %+v", sc)
	}

	msg, err := h.srv.KillSession(id(a), true)
	if err != nil {
		t.Fatalf("KillSession query only: %v", err)
	}
	if r := waitOutcome(t, aDone, 10*time.Second, "killed statement"); r != "interrupted" {
		t.Fatalf("statement after KillSession(query only): %q (%s)", r, msg)
	}
	if rows := a.query("SELECT 1"); rows[0][0] != "1" {
		t.Fatalf("session after KILL QUERY: %v", rows)
	}
	if msg, err = h.srv.KillSession(id(b), false); err != nil || !strings.Contains(msg, "closed") {
		t.Fatalf("KillSession: %q, %v", msg, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := byID()[id(b)]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("killed session still listed after 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := h.srv.KillSession("4000000000", false); !errors.Is(err, ErrNoSession) {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := h.srv.KillSession("x", false); !errors.Is(err, ErrNoSession) {
		t.Errorf("bad id: %v", err)
	}
}
