package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/gtid"
	"github.com/switchyard-db/switchyard/internal/probe"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// alarmReceivedAfterCut is the alarm raised when a replica whose IO thread
// a failover cut (ioCut) turns out, once the thread exited, to have
// received more than the failover planned with: the event it was queueing
// when the KILL landed. On the promoted candidate that transaction is in
// its relay log but was not applied before it took writes; on another
// replica it may be a transaction the new primary lacks (it is then not
// repointed).
const alarmReceivedAfterCut = "received_after_cut"

// cutExitSlack is added to three times a replica's
// rpl_semi_sync_slave_kill_conn_timeout (its dump-thread kill may connect,
// then read and write, each bounded by it) and its slave_net_timeout (a
// thread cut while connecting first finishes that connect, bounded by it)
// to bound the wait for a cut IO thread to exit.
const cutExitSlack = 2 * time.Second

// ioCut is a replica whose replication IO thread an emergency failover cut
// with KILL (probe.CutReplicaIO) instead of stopping it: it reads nothing
// more from the old primary, and its exit — a semi-sync replica connects to
// the old primary to kill its dump thread there, which for a partitioned
// primary waits rpl_semi_sync_slave_kill_conn_timeout — goes on in the
// background while the failover applies the relay log, promotes and
// publishes. What needs the thread gone (RESET SLAVE ALL, CHANGE MASTER,
// START SLAVE IO_THREAD) waits for done.
type ioCut struct {
	node string
	done chan struct{}
	// final is the replica's replication status once the thread exited
	// (its Gtid_IO_Pos is then final); err says why it did not exit.
	final topo.Probe
	err   error
}

// gone reports whether the cut IO thread has exited (or the wait ended).
func (c *ioCut) gone() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// wait blocks until the cut IO thread exited and returns why not if it did
// not within its bound.
func (c *ioCut) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for its cut IO thread to exit: %w", c.node, ctx.Err())
	}
}

// cutsIO reports whether a replica's IO thread is cut rather than stopped:
// a running (or connecting) IO thread of a MariaDB semi-sync replica,
// whose STOP SLAVE waits for the dump-thread kill on the old primary (a
// connecting one too: measured 1.0s on 10.11.19 with the source cut off).
func cutsIO(flavor string, p topo.Probe) bool {
	return flavorOrDefault(flavor) == probe.FlavorMariaDB && (p.IORunning == "Yes" || p.IORunning == "Connecting") && p.SemiSync != nil &&
		(p.SemiSync.SlaveEnabled || p.SemiSync.SlaveStatus)
}

// cutIO cuts the IO thread of replica name (probed as p) and starts waiting
// for its exit in the background, bounded by the exit's own bound and not
// by ctx (a rollback after the recovery deadline still waits for it). It
// reports false when there was nothing to cut or cutting is not supported
// there (the caller stops the thread instead).
func (f *failoverRun) cutIO(ctx context.Context, name string, pr *nodeProber, p topo.Probe) (bool, error) {
	kctx, cancel := context.WithTimeout(ctx, stepTimeout)
	cut, err := pr.CutReplicaIO(kctx)
	cancel()
	if errors.Is(err, probe.ErrCutUnsupported) {
		return false, nil
	}
	if err != nil || !cut {
		return false, err
	}
	kill := time.Duration(max(p.SemiSync.SlaveKillConnTimeout, 1)) * time.Second
	if p.SemiSync.SlaveKillConnTimeout == 0 {
		kill = 5 * time.Second // MariaDB's default
	}
	// A thread that was (or since the probe went) reconnecting finishes
	// its connect first.
	netTimeout := time.Duration(p.NetTimeoutSeconds) * time.Second
	if netTimeout <= 0 {
		netTimeout = 60 * time.Second // MariaDB's default
	}
	bound := 3*kill + netTimeout + cutExitSlack
	c := &ioCut{node: name, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.final, c.err = pr.WaitReplicaIOGone(context.WithoutCancel(ctx), bound)
	}()
	f.cutMu.Lock()
	if f.cuts == nil {
		f.cuts = map[string]*ioCut{}
	}
	f.cuts[name] = c
	f.cutMu.Unlock()
	return true, nil
}

// cut returns the cut of replica name, or nil.
func (f *failoverRun) cut(name string) *ioCut {
	f.cutMu.Lock()
	defer f.cutMu.Unlock()
	return f.cuts[name]
}

// cutPending reports whether any of names has a cut IO thread still
// exiting.
func (f *failoverRun) cutPending(names ...string) bool {
	for _, n := range names {
		if c := f.cut(n); c != nil && !c.gone() {
			return true
		}
	}
	return false
}

// afterCut waits until the cut IO thread of name (if any) exited and checks
// that the replica received nothing beyond what the plan counted for it.
func (f *failoverRun) afterCut(ctx context.Context, name string) error {
	c := f.cut(name)
	if c == nil {
		return nil
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	late, err := f.receivedAfterCut(name, c.final)
	if err != nil {
		return err
	}
	if late == "" {
		return nil
	}
	msg := fmt.Sprintf("%s received %s after the failover cut its IO thread (the event it was queueing when the KILL landed), beyond the %s the failover planned with", name, late, orDash(f.receivedBy(name)))
	if name == f.plan.Candidate {
		msg += ": it is in the new primary's relay log, not applied; compare with the old primary's binlog before discarding it"
	} else {
		msg += ": not repointed (it may hold a transaction the new primary lacks); reconcile or rebuild it"
	}
	f.t.raiseAlarm(ctx, f.cr, topo.Alarm{Code: alarmReceivedAfterCut, Node: name, Message: msg})
	return errors.New(msg)
}

// receivedBy is what the plan counted as received by node.
func (f *failoverRun) receivedBy(node string) string {
	for _, c := range f.plan.Candidates {
		if c.Node == node {
			return c.Received
		}
	}
	return ""
}

// receivedAfterCut returns the GTIDs in final's Gtid_IO_Pos that the plan
// did not count as received by node ("" when none).
func (f *failoverRun) receivedAfterCut(node string, final topo.Probe) (string, error) {
	if final.GTIDIO == "" {
		return "", nil
	}
	fl := gtid.Flavor(flavorOrDefault(f.cl.Flavor))
	io, err := gtid.Parse(fl, final.GTIDIO)
	if err != nil {
		return "", fmt.Errorf("%s Gtid_IO_Pos %q: %w", node, final.GTIDIO, err)
	}
	planned, err := gtid.Parse(fl, f.receivedBy(node))
	if err != nil {
		return "", fmt.Errorf("%s planned position %q: %w", node, f.receivedBy(node), err)
	}
	if planned.Contains(io) {
		return "", nil
	}
	return io.String(), nil
}

// promoteCut promotes a candidate whose cut IO thread is still exiting: the
// relay log it received is applied (applyRelay) and nothing more arrives,
// so it stops its SQL thread (at once: a cut holds no replication lock)
// and becomes writable; its replication is reset once the thread exited
// (resetAfterCut, after the publication).
func (f *failoverRun) promoteCut(ctx context.Context, pr *nodeProber) (string, error) {
	f.promoting, f.resetPending = true, true
	if err := pr.StopReplicaSQL(ctx); err != nil {
		return "", err
	}
	if err := pr.SetReadOnly(ctx, false); err != nil {
		return "", err
	}
	ro, err := pr.ReadOnly(ctx)
	if err != nil {
		return "", err
	}
	if ro {
		return "", errors.New("read_only is still ON after SET GLOBAL read_only=OFF (check READ_ONLY ADMIN)")
	}
	return "SQL thread stopped, read_only=OFF; replication reset once its cut IO thread has exited", nil
}

// resetAfterCut resets the promoted candidate's replication once its cut
// IO thread exited.
func (f *failoverRun) resetAfterCut(ctx context.Context) (string, error) {
	cand := f.plan.Candidate
	begin := f.t.c.now()
	if err := f.afterCut(ctx, cand); err != nil {
		return "", err
	}
	waited := f.t.c.now().Sub(begin).Round(time.Millisecond)
	pr, err := f.prober(cand)
	if err != nil {
		return "", err
	}
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := pr.ForgetReplication(sctx); err != nil {
		return "", err
	}
	f.resetPending = false
	return fmt.Sprintf("replication reset once its cut IO thread had exited (waited %s in this step)", waited), nil
}

// semiSyncAhead makes the candidate a semi-sync primary before its
// replicas are repointed (they wait for their cut IO threads to exit
// first), so the publication need not wait for the repointing. It needs at
// least one replica that will be repointed to be a semi-sync replica.
//
// Unless clusters[].durability is semi_sync_durable it also switches the
// candidate's rpl_semi_sync_master_wait_no_slave off until the first
// semi-sync replica is repointed (restoreWaitNoSlave): with no semi-sync
// replica attached a commit then returns without waiting (MariaDB's
// Repl_semi_sync_master::commit_trx), so the first writes through the
// proxies do not wait for a cut IO thread's exit — about
// rpl_semi_sync_slave_kill_conn_timeout, 1 s — and the repointing. Those
// writes are on the new primary alone until a replica receives them (its
// GTID position follows on from the candidate's), as the writes of a
// semi_sync primary that falls back to asynchronous replication after
// rpl_semi_sync_master_timeout; from the replica's attachment on, every
// commit waits for its acknowledgement again. semi_sync_durable keeps
// wait_no_slave ON: its first commits wait for the attachment.
func (f *failoverRun) semiSyncAhead(ctx context.Context) (string, error) {
	var targets []string
	for _, n := range f.repointTargets() {
		if f.opStopped[n.Name] == "" {
			targets = append(targets, n.Name)
		}
	}
	cand := f.plan.Candidate
	relax := false
	if p := f.probes[cand]; f.cl.Durability != config.DurabilitySemiSyncDurable && p.SemiSync != nil && p.SemiSync.WaitNoSlave && len(targets) > 0 {
		pr, err := f.prober(cand)
		if err != nil {
			return "", err
		}
		off := false
		if err := pr.ApplySemiSyncPrimary(ctx, probe.SemiSyncSettings{WaitNoSlave: &off}); err != nil {
			return "", err
		}
		relax, f.waitNoSlaveOff = true, true
	}
	f.semiSyncEarly = true
	detail, err := f.t.semiSyncPrimary(ctx, f.cfg, f.cl, cand, targets)
	if err != nil {
		f.semiSyncEarly = false
		if relax {
			if _, rerr := f.restoreWaitNoSlave(ctx); rerr != nil {
				err = fmt.Errorf("%w; %v", err, rerr)
			}
		}
		return "", err
	}
	if relax {
		return detail + " (before they are repointed), rpl_semi_sync_master_wait_no_slave=OFF until one is: commits do not wait for a replica still being repointed", nil
	}
	return detail + " (before they are repointed: commits wait for the first to attach)", nil
}

// restoreWaitNoSlave switches the candidate's
// rpl_semi_sync_master_wait_no_slave back on after semiSyncAhead switched
// it off (a no-op otherwise).
func (f *failoverRun) restoreWaitNoSlave(ctx context.Context) (string, error) {
	if !f.waitNoSlaveOff {
		return "", nil
	}
	pr, err := f.prober(f.plan.Candidate)
	if err != nil {
		return "", err
	}
	on := true
	if err := pr.ApplySemiSyncPrimary(ctx, probe.SemiSyncSettings{WaitNoSlave: &on}); err != nil {
		return "", fmt.Errorf("%w: rpl_semi_sync_master_wait_no_slave stays OFF on %s (commits do not wait while no semi-sync replica is attached)", err, f.plan.Candidate)
	}
	f.waitNoSlaveOff = false
	return "rpl_semi_sync_master_wait_no_slave=ON again", nil
}

// semiSyncAfterRepoint follows the repointing of a new primary that got
// semi-sync before it (semiSyncAhead): its rpl_semi_sync_master_wait_no_slave
// is switched back on, and semi-sync is turned off again when no semi-sync
// replica was repointed after all and clusters[].durability does not ask
// for it (its commits would otherwise each wait
// rpl_semi_sync_master_timeout).
func (f *failoverRun) semiSyncAfterRepoint(ctx context.Context) (string, error) {
	if f.cl.Durability == config.DurabilitySemiSync && f.waitNoSlaveOff && f.semiSyncRepointed(ctx) == "" {
		// Nothing to wait for: switching it back on would make each of
		// the new primary's first commits wait rpl_semi_sync_master_timeout
		// (the probe rounds switch it on when a replica attaches).
		f.waitNoSlaveOff = false
		return "", fmt.Errorf("no semi-sync replica was repointed: rpl_semi_sync_master_wait_no_slave stays OFF on %s, so that its commits do not wait for a replica that is not there (durability %s; ON again when one attaches)",
			f.plan.Candidate, f.cl.Durability)
	}
	restored, err := f.restoreWaitNoSlave(ctx)
	if err != nil {
		return "", err
	}
	with := func(s string) string {
		if restored == "" {
			return s
		}
		return s + ", " + restored
	}
	if name := f.semiSyncRepointed(ctx); name != "" {
		return with("semi-sync replica " + name + " repointed"), nil
	}
	if mode := f.cl.Durability; mode == config.DurabilitySemiSync || mode == config.DurabilitySemiSyncDurable {
		return "", fmt.Errorf("no semi-sync replica was repointed: commits on %s wait for one (durability %s)", f.plan.Candidate, mode)
	}
	pr, err := f.prober(f.plan.Candidate)
	if err != nil {
		return "", err
	}
	if err := pr.DisableSemiSyncPrimary(ctx); err != nil {
		return "", err
	}
	return "", errors.New("no semi-sync replica was repointed: semi-sync off again, the new primary stays asynchronous (acknowledged writes are not protected until one is)")
}

// cutNames lists the replicas whose IO thread was cut.
func (f *failoverRun) cutNames() string {
	f.cutMu.Lock()
	defer f.cutMu.Unlock()
	var names []string
	for _, n := range f.cl.Nodes {
		if f.cuts[n.Name] != nil {
			names = append(names, n.Name)
		}
	}
	return strings.Join(names, ", ")
}

// semiSyncRepointed returns the first repointed replica that is a
// semi-sync replica, "" when none is.
func (f *failoverRun) semiSyncRepointed(ctx context.Context) string {
	for _, name := range f.repointed {
		if n := f.cl.Node(name); n != nil {
			if pr, err := f.t.c.prober(f.cfg, f.cl, n); err == nil && pr.SemiSyncReplica(ctx) {
				return name
			}
		}
	}
	return ""
}
