package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"

	"github.com/switchyard-db/switchyard/internal/config"
)

// Fencing an old primary that could not be reached when it was replaced.
//
// A frozen server (SIGSTOP, a stalled VM) is unreachable yet alive: when it
// wakes it is still writable (read_only=OFF) and its in-flight commits
// complete. The repair loop fences it at its next round, up to a probe
// interval after the wake. To close that window, after such a failover the
// leader keeps a fencing connection attempt pending on the old primary: the
// TCP connect to a frozen mariadbd completes in the kernel's accept queue,
// and the handshake, `SET GLOBAL read_only=ON` and the kill of client
// sessions run the moment it wakes. The first attempt waits as long as the
// whole fence may (wakeFenceAttempt = wakeFenceMax): a woken mariadbd
// accepts its queue in order, and every connect that others (the proxies'
// checks, monitoring) made and gave up on while it was frozen sits in that
// queue; an attempt renewed later would come behind them (or, with the
// queue full at back_log, not be queued at all) and the woken node would
// stay writable while the server works through them. A second attempt,
// started half an attempt later, covers a first that failed; a refused
// connection (the node was killed or restarts) is retried every
// wakeFenceRetry. It starts once the failover is announced
// (phase failover), and stops when the fence succeeded, when the failover
// rolled back (the returned cancel), when the old primary is primary again
// (checked again after the server answered, before anything is changed),
// after wakeFenceMax, or when the term ends.
const (
	wakeFenceMax     = time.Hour
	wakeFenceAttempt = wakeFenceMax
	wakeFenceRetry   = 200 * time.Millisecond
)

// fenceWhenAwake starts the pending fence of old (see above) and returns
// its cancel.
func (t *term) fenceWhenAwake(ctx context.Context, cfg *config.Config, cl *config.Cluster, cr *clusterRun, old string, epoch int64) func() {
	n := cl.Node(old)
	if n == nil || ctx.Err() != nil {
		return func() {}
	}
	pw, err := cfg.Credentials.Monitor.Resolve()
	if err != nil {
		return func() {}
	}
	tc, err := config.BackendTLS(cl.TLS, "")
	if err != nil {
		return func() {}
	}
	cred := probe.Credentials{User: cfg.Credentials.Monitor.User, Password: pw, TLS: tc}
	replUser := cfg.Credentials.Replication.User
	log := t.log.With("cluster", cl.Name, "node", old, "epoch", epoch)
	fctx, cancel := context.WithTimeout(ctx, wakeFenceMax)
	done := make(chan struct{})
	var once bool
	finish := func(started time.Time, detail string) {
		t.fo.mu.Lock()
		first := !once
		once = true
		t.fo.mu.Unlock()
		if !first {
			return
		}
		cancel()
		close(done)
		msg := fmt.Sprintf("fenced old primary %s the moment it answered again (%s after the failover of epoch %d): %s",
			old, t.c.now().Sub(started).Round(time.Millisecond), epoch, detail)
		log.Warn("old primary fenced on wake", "detail", detail)
		ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), stopWriteTimeout)
		defer ecancel()
		_ = t.fo.events.emit(ectx, topo.Event{Cluster: cl.Name, Kind: topo.EventDecision, Code: "fence_on_wake",
			Node: old, Message: msg, Epoch: epoch})
	}
	notPrimary := func() bool {
		cr.mu.Lock()
		defer cr.mu.Unlock()
		return cr.state == nil || cr.state.Primary != old
	}
	started := t.c.now()
	worker := func(delay time.Duration) {
		defer t.fo.wg.Done()
		sleep(fctx, delay)
		for fctx.Err() == nil && notPrimary() {
			actx, acancel := context.WithTimeout(fctx, wakeFenceAttempt)
			begin := time.Now()
			detail, err := wakeFence(actx, n.Address, cred, cl.Flavor, replUser, notPrimary)
			acancel()
			if err == nil {
				finish(started, detail)
				return
			}
			select {
			case <-done:
				return
			default:
			}
			if time.Since(begin) < wakeFenceRetry {
				sleep(fctx, wakeFenceRetry)
			}
		}
	}
	t.fo.wg.Add(2)
	go worker(0)
	go worker(wakeFenceAttempt / 2)
	log.Info("fence pending on the unreachable old primary: it is fenced the moment it answers")
	return cancel
}

// wakeFence connects to address (waiting, bounded by ctx, for a frozen
// server to answer the handshake), then sets read_only=ON, kills
// client sessions and verifies (fence): read_only first, so that a lock
// held by a woken session delays the fence by at most fenceLockWait.
func wakeFence(ctx context.Context, address string, cred probe.Credentials, flavor, replUser string, proceed func() bool) (string, error) {
	pr := probe.NewProber(address, cred, flavor, wakeFenceAttempt)
	defer pr.Close()
	// The first statement waits for the handshake; fence then bounds its
	// lock wait and kills what blocks it.
	if _, err := pr.ReadOnly(ctx); err != nil {
		return "", err
	}
	if !proceed() || ctx.Err() != nil {
		return "", errors.New("the old primary is primary again: not fencing it")
	}
	at := time.Now()
	if err := fenceAtOnce(ctx, pr, replUser); err != nil {
		return "", err
	}
	return fmt.Sprintf("read_only=ON, client sessions killed (%s after the connection was answered)", time.Since(at).Round(time.Millisecond)), nil
}

// wakeFenceKillAfter is how long fenceAtOnce lets SET GLOBAL read_only=ON
// wait before it kills the client sessions that block it.
const wakeFenceKillAfter = 20 * time.Millisecond

// fenceAtOnce fences a node that must stop taking writes now — an old
// primary that answers again after it was failed over — without waiting
// for what its woken sessions hold. It sends SET GLOBAL read_only=ON and,
// when that has not completed within wakeFenceKillAfter, kills the client
// sessions while the SET waits: the pending SET's backup-lock request makes
// new commits queue behind it, and the sessions it waits for end when
// killed. Those are typically commits waiting for a semi-sync
// acknowledgement that no replica will send (the failover stopped their IO
// threads): MariaDB ends such a wait when the session is killed, and
// otherwise only after rpl_semi_sync_master_timeout, which would leave the
// old primary writable that long. Then it verifies read_only and kills the
// client sessions again (see fence).
func fenceAtOnce(ctx context.Context, pr *probe.Prober, replUser string) error {
	done := make(chan error, 1)
	go func() { done <- pr.SetReadOnly(ctx, true) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(wakeFenceKillAfter):
		if _, kerr := pr.KillClientSessions(ctx, replUser); kerr != nil {
			return fmt.Errorf("read_only=ON waits and killing client sessions failed: %w", kerr)
		}
		err = <-done
	}
	if err != nil {
		return err
	}
	ro, err := pr.ReadOnly(ctx)
	if err != nil {
		return err
	}
	if !ro {
		return errors.New("read_only is still OFF after SET GLOBAL read_only=ON")
	}
	_, err = pr.KillClientSessions(ctx, replUser)
	return err
}
