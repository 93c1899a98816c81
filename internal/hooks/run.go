package hooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
)

// maxOutput bounds how much of a command's output or a response body is
// kept for the event log and a veto's refusal.
const maxOutput = 2048

// Results of one attempt (label "result" of switchyard_hook_runs_total).
const (
	ResultOK      = "ok"
	ResultFailed  = "failed"  // non-zero exit, non-2xx status, connection error
	ResultTimeout = "timeout" // the hook's timeout passed
	ResultDropped = "dropped" // the hook's queue was full; never attempted
)

// Attempt is the outcome of one run of a hook.
type Attempt struct {
	Hook    string
	Event   string
	Cluster string
	Node    string
	// N is the attempt's number, from 1; Of is how many there may be.
	N, Of int
	// Result is ResultOK, ResultFailed or ResultTimeout.
	Result string
	// ExitCode is a command's exit status (-1 when it did not exit, e.g.
	// killed at the timeout or not started); Status an HTTP status (0
	// when no response came).
	ExitCode int
	Status   int
	Duration time.Duration
	// Err says what failed ("" when Result is ResultOK).
	Err string
	// Output is the start of the command's output (stdout and stderr) or
	// of the response body, at most 2 KiB.
	Output string
	// Veto is true for a veto hook's run.
	Veto bool
}

// OK reports whether the attempt succeeded.
func (a Attempt) OK() bool { return a.Result == ResultOK }

// Summary is one line about the attempt for logs and events:
// `hook "page" on dead_primary: ok in 12ms (exit 0)`.
func (a Attempt) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hook %q on %s: %s in %s", a.Hook, a.Event, a.Result, a.Duration.Round(time.Millisecond))
	switch {
	case a.Status != 0:
		fmt.Fprintf(&b, " (HTTP %d)", a.Status)
	case a.ExitCode >= 0:
		fmt.Fprintf(&b, " (exit %d)", a.ExitCode)
	}
	if a.Of > 1 {
		fmt.Fprintf(&b, ", attempt %d of %d", a.N, a.Of)
	}
	if a.Err != "" {
		b.WriteString(": " + a.Err)
	}
	if out := strings.TrimSpace(a.Output); out != "" && !a.OK() {
		b.WriteString("; output: " + out)
	}
	return b.String()
}

// capped keeps the first maxOutput bytes written to it and discards the
// rest (a hook writing a lot never grows the controller's memory).
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxOutput - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// attempt runs h once with body as its payload, bounded by its timeout.
func attempt(ctx context.Context, h config.Hook, body []byte, p Payload, client *http.Client) Attempt {
	a := Attempt{Hook: h.Name, Event: p.Event, Cluster: p.Cluster, Node: p.Node, ExitCode: -1, Veto: h.Veto}
	timeout := h.Timeout.D()
	if timeout <= 0 {
		timeout = config.DefaultHookTimeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var err error
	if len(h.Command) > 0 {
		a.ExitCode, a.Output, err = runCommand(actx, h, body, p)
	} else {
		a.Status, a.Output, err = post(actx, h, body, client)
	}
	a.Duration = time.Since(start)
	switch {
	case err == nil:
		a.Result = ResultOK
	case errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		a.Result, a.Err = ResultTimeout, fmt.Sprintf("timed out after %s (hooks[].timeout)", timeout)
	default:
		a.Result, a.Err = ResultFailed, err.Error()
	}
	return a
}

// runCommand runs the hook's argv without a shell, payload on stdin, in its
// own process group so that the timeout kills what it started too.
func runCommand(ctx context.Context, h config.Hook, body []byte, p Payload) (int, string, error) {
	cmd := exec.CommandContext(ctx, h.Command[0], h.Command[1:]...)
	cmd.Stdin = bytes.NewReader(body)
	var out capped
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), p.Env(h.Name)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Output pipes held open by a grandchild must not keep Wait waiting.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && code > 0 {
			err = fmt.Errorf("%s exited with status %d", h.Command[0], code)
		} else {
			err = fmt.Errorf("run %s: %w", h.Command[0], err)
		}
	}
	return code, out.String(), err
}

// post sends the payload to the hook's URL; a non-2xx status is an error.
func post(ctx context.Context, h config.Hook, body []byte, client *http.Client) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return 0, "", fmt.Errorf("hooks %s url: %w", h.Name, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "switchyard-hook/1")
	for i, hd := range h.Headers {
		v, err := hd.Resolve()
		if err != nil {
			return 0, "", fmt.Errorf("headers[%d] (%s): %w", i, hd.Name, err)
		}
		req.Header.Set(hd.Name, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // drop the URL (it may hold a token) from "Post URL: ..."
		}
		return 0, "", fmt.Errorf("POST: %w", err)
	}
	defer resp.Body.Close()
	var out capped
	_, _ = io.Copy(&out, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, out.String(), fmt.Errorf("POST answered %s", resp.Status)
	}
	return resp.StatusCode, out.String(), nil
}
