package console_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// browser is a headless chromium driven through the DevTools protocol on
// --remote-debugging-pipe: JSON messages separated by NUL bytes, commands
// on the child's fd 3, answers and events on its fd 4.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	w       io.WriteCloser
	mu      sync.Mutex
	next    int
	pending map[int]chan cdpAnswer
	session string
	done    chan struct{}
}

type cdpAnswer struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// findChromium returns the path of a chromium binary or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startBrowser starts chromium with a 1366×768 window and opens url in a
// new page; it is stopped (Browser.close, then its process group killed)
// when the test ends.
func startBrowser(t *testing.T, bin, url string) *browser {
	t.Helper()
	cmdR, cmdW, err := os.Pipe() // we write commands, chromium reads fd 3
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe() // chromium writes fd 4, we read
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
		"--disable-background-networking", "--disable-sync", "--mute-audio",
		"--user-data-dir="+t.TempDir(), "--window-size=1366,768", "about:blank")
	cmd.ExtraFiles = []*os.File{cmdR, outW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := os.CreateTemp(t.TempDir(), "chromium-stderr")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	cmdR.Close()
	outW.Close()
	b := &browser{t: t, cmd: cmd, w: cmdW, pending: map[int]chan cdpAnswer{}, done: make(chan struct{})}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	go b.read(outR)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, _ = b.call(ctx, "", "Browser.close", nil)
		cancel()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
		}
		// The renderer and helper processes are in chromium's group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		cmdW.Close()
		if t.Failed() {
			if data, err := os.ReadFile(stderr.Name()); err == nil && len(data) > 0 {
				if len(data) > 4000 {
					data = data[len(data)-4000:]
				}
				t.Logf("chromium stderr (tail):\n%s", data)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": url})
	if err != nil {
		t.Fatalf("chromium: open %s: %v", url, err)
	}
	var target struct {
		TargetID string `json:"targetId"`
	}
	_ = json.Unmarshal(res, &target)
	res, err = b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	if err != nil {
		t.Fatalf("chromium: attach to the page: %v", err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(res, &att)
	b.session = att.SessionID
	return b
}

func (b *browser) read(r io.Reader) {
	defer close(b.done)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var a cdpAnswer
		if json.Unmarshal(msg[:len(msg)-1], &a) != nil || a.ID == 0 {
			continue // an event
		}
		b.mu.Lock()
		ch := b.pending[a.ID]
		delete(b.pending, a.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- a
		}
	}
}

// call sends one command (to the page when session is not "") and waits
// for its answer.
func (b *browser) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan cdpAnswer, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	if _, err := b.w.Write(append(data, 0)); err != nil {
		return nil, fmt.Errorf("%s: write to chromium: %w", method, err)
	}
	select {
	case a := <-ch:
		if a.Error != nil {
			return nil, fmt.Errorf("%s: %s (%d)", method, a.Error.Message, a.Error.Code)
		}
		return a.Result, nil
	case <-b.done:
		return nil, fmt.Errorf("%s: chromium closed its pipe", method)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// eval evaluates a JavaScript expression in the page (awaiting a promise)
// and decodes its JSON-serialisable value into out.
func (b *browser) eval(expr string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := b.call(ctx, b.session, "Runtime.evaluate", map[string]any{
		"expression": expr, "returnByValue": true, "awaitPromise": true})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("page: %s %s", r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// screenshot saves what the page shows (the 1366×768 viewport) as
// NAME.png in the test's artifact directory: kept under -outputdir when
// the test runs with -artifacts (go test -artifacts -outputdir DIR),
// removed with the test's temporary files otherwise. It logs the path.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.call(ctx, b.session, "Page.captureScreenshot", map[string]any{"format": "png"})
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	var shot struct {
		Data string `json:"data"`
	}
	png, err := base64.StdEncoding.DecodeString(func() string { _ = json.Unmarshal(res, &shot); return shot.Data }())
	if err != nil || len(png) == 0 {
		b.t.Errorf("screenshot %s: no PNG data (%v)", name, err)
		return
	}
	p := filepath.Join(b.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot %s", p)
}

// waitFor evaluates expr (into a fresh value of T) until ok accepts it or
// timeout passes, and returns the last value.
func waitFor[T any](t *testing.T, b *browser, what string, timeout time.Duration, expr string, ok func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last T
	var lastErr error
	for {
		var v T
		if err := b.eval(expr, &v); err != nil {
			lastErr = err
		} else {
			last, lastErr = v, nil
			if ok(v) {
				return v
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last value %+v, error %v", what, timeout, last, lastErr)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
