package configstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// ErrConflict: the current revision changed between reading it and writing
// the new one (another apply won the compare-and-swap), or it is not the
// revision the operator reviewed (Change.ExpectRev). Nothing was written;
// review the diff again and retry.
var ErrConflict = errors.New("configstore: the current config revision changed concurrently")

// DefaultOverrideHint is RefusedError.Override when Change.OverrideHint is
// empty.
const DefaultOverrideHint = "to apply it anyway, repeat with --allow-destructive and a --reason saying why (the override is recorded in the history)"

// Change is a config to apply as a new revision.
type Change struct {
	// Config is the new config (defaults applied). It must pass Validate.
	Config *config.Config
	// Reason says why; required (it goes into the history).
	Reason string
	// Author is "user@host"; default Author().
	Author string
	// Source is SourceApply (default), SourceRollback, SourceBootstrap or
	// SourceReload.
	Source string
	// RollbackOf is the revision a rollback restores.
	RollbackOf int64
	// AllowDestructive applies the change even when the guard refuses it;
	// the violations are recorded in the revision.
	AllowDestructive bool
	// ExpectRev, when not 0, applies the change only if the current revision
	// is still ExpectRev (the one the operator reviewed with `config diff`);
	// ErrConflict otherwise.
	ExpectRev int64
	// Live is the running state the guard checks against; nil reads it from
	// the store (ReadLive).
	Live *config.Live
	// OverrideHint is RefusedError.Override; default DefaultOverrideHint.
	OverrideHint string
	// Now is the clock for Revision.Time; default time.Now.
	Now func() time.Time
	// DryRun computes the diff and the guard's verdict (Result.Violations)
	// and writes nothing; it returns no RefusedError.
	DryRun bool
}

// Result is what Apply did.
type Result struct {
	// Revision is the new revision; with Unchanged, the current one.
	Revision *Revision
	// Previous is the revision the change was compared with (nil on the
	// first apply).
	Previous *Revision
	// Unchanged is true when the current revision already has this content:
	// nothing was written.
	Unchanged bool
	// Diff is the change from Previous.
	Diff config.Diff
	// Violations are the guard's reasons; on success they were overridden.
	Violations []config.Violation
	// Repaired is set when the current key was missing or held an invalid
	// value (written around Apply) that this revision replaced; it says what
	// was wrong.
	Repaired string
	// Warnings are problems after the revision was written (history
	// bookkeeping); the revision is applied regardless.
	Warnings []string
	// FileDiffers is set by Bootstrap when the store's current revision was
	// kept although the config file differs from it (Diff says how).
	FileDiffers bool
	// Running is, when Bootstrap kept the store's current revision, that
	// revision's config: the one to run. Nil otherwise.
	Running *config.Config
}

// RefusedError is a change the destructive-change guard refused: nothing
// was written. Unwrap gives the *config.GuardError.
type RefusedError struct {
	// Against is the revision the change was compared with (0: none).
	Against int64
	// Guard holds the violations and the diff.
	Guard *config.GuardError
	// Override says how to apply it anyway.
	Override string
}

// Error names the revision compared against, every reason, the diff and
// the override, on several lines.
func (e *RefusedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "configstore: change refused against revision %d: %s\n", e.Against, strings.TrimPrefix(e.Guard.Error(), "config: "))
	b.WriteString("the refused change:\n")
	for _, l := range strings.Split(strings.TrimRight(e.Guard.Diff.String(), "\n"), "\n") {
		b.WriteString("  " + l + "\n")
	}
	b.WriteString(e.Override)
	return b.String()
}

// Unwrap returns the guard's error.
func (e *RefusedError) Unwrap() error { return e.Guard }

// Apply writes ch.Config as a new revision: it validates the config,
// compares it with the base revision (the current one, or the newest valid
// one of the history when the current key holds garbage), runs the guard
// and, unless refused, updates the current key by compare-and-swap on the
// version it read, then records the revision in the history and trims the
// history to config.history_limit of the new config. A config with the
// content of the current revision writes nothing (Result.Unchanged).
//
// Errors: the config's validation errors; *RefusedError when the guard
// refuses and ch.AllowDestructive is false; ErrConflict (wrapping
// topo.ErrBadVersion or topo.ErrExists) when the current revision changed;
// store errors, wrapped.
func Apply(ctx context.Context, st topo.Store, keys topo.Keys, ch Change) (*Result, error) {
	if ch.Config == nil {
		return nil, errors.New("configstore: no config to apply")
	}
	if strings.TrimSpace(ch.Reason) == "" && !ch.DryRun {
		return nil, errors.New("configstore: a reason is required (--reason TEXT): it is recorded in the history")
	}
	if err := ch.Config.Validate(); err != nil {
		return nil, fmt.Errorf("configstore: the config is invalid:\n%w", err)
	}
	data, err := ch.Config.Marshal()
	if err != nil {
		return nil, fmt.Errorf("configstore: encode config: %w", err)
	}
	// What consumers will read must be what was validated.
	if _, cfg, derr := Decode(mustEncodeProbe(data)); derr != nil || cfg == nil {
		return nil, fmt.Errorf("configstore: the config does not survive encoding: %v", derr)
	}
	hash := Hash(data)
	now := time.Now
	if ch.Now != nil {
		now = ch.Now
	}

	s, err := Load(ctx, st, keys)
	if err != nil {
		return nil, err
	}
	if ch.ExpectRev != 0 && (s.Current == nil || s.Current.Rev != ch.ExpectRev) {
		have := "no valid revision"
		if s.Current != nil {
			have = fmt.Sprintf("revision %d", s.Current.Rev)
		}
		return nil, fmt.Errorf("%w: expected revision %d (the one reviewed), the store has %s: review `switchyard config diff` again", ErrConflict, ch.ExpectRev, have)
	}
	res := &Result{Previous: s.Base}
	res.Diff = config.ComputeDiff(s.BaseConfig, ch.Config)
	if s.Current != nil && s.Current.SHA256 == hash {
		res.Revision, res.Unchanged = s.Current, true
		return res, nil
	}

	var live config.Live
	if ch.Live != nil {
		live = *ch.Live
	} else if live, err = ReadLive(ctx, st, keys); err != nil {
		return nil, err
	}
	res.Violations = config.Guard(s.BaseConfig, ch.Config, live)
	res.Violations = append(res.Violations, checkCredentials(ctx, s.BaseConfig, ch.Config, live)...)
	var against int64
	if s.Base != nil {
		against = s.Base.Rev
	}
	if ch.DryRun {
		return res, nil
	}
	if len(res.Violations) > 0 && !ch.AllowDestructive {
		hint := ch.OverrideHint
		if hint == "" {
			hint = DefaultOverrideHint
		}
		return res, &RefusedError{Against: against, Guard: &config.GuardError{Violations: res.Violations, Diff: res.Diff}, Override: hint}
	}

	rev := &Revision{
		Rev:        s.NextRev,
		Parent:     against,
		Author:     ch.Author,
		Time:       now().UTC(),
		Reason:     ch.Reason,
		Source:     ch.Source,
		RollbackOf: ch.RollbackOf,
		SHA256:     hash,
		YAML:       string(data),
	}
	if rev.Author == "" {
		rev.Author = Author()
	}
	if rev.Source == "" {
		rev.Source = SourceApply
	}
	if len(res.Violations) > 0 {
		rev.GuardOverridden = true
		for _, v := range res.Violations {
			rev.GuardViolations = append(rev.GuardViolations, v.String())
		}
	}
	doc, err := encode(rev)
	if err != nil {
		return nil, err
	}

	// The revision being replaced belongs in the history before the new one
	// is current (it may be missing if an earlier apply stopped halfway).
	if s.Current != nil {
		if _, ok := s.historyVersions[s.Current.Rev]; !ok {
			if prev, err := encode(s.Current); err == nil {
				if _, err := st.Create(ctx, keys.ConfigRevision(s.Current.Rev), prev); err != nil && !errors.Is(err, topo.ErrExists) {
					res.Warnings = append(res.Warnings, fmt.Sprintf("recording revision %d in the history: %v", s.Current.Rev, err))
				}
			}
		}
	}

	if s.Version == 0 {
		_, err = st.Create(ctx, keys.Config(), doc)
	} else {
		_, err = st.Update(ctx, keys.Config(), doc, s.Version)
	}
	switch {
	case errors.Is(err, topo.ErrBadVersion), errors.Is(err, topo.ErrExists), errors.Is(err, topo.ErrNotFound):
		return nil, fmt.Errorf("%w (%w): nothing was written; review the diff again and retry", ErrConflict, err)
	case err != nil:
		return nil, fmt.Errorf("configstore: write %s: %w", keys.Config(), err)
	}
	res.Revision = rev
	switch {
	case s.CurrentErr != nil:
		res.Repaired = s.CurrentErr.Error()
	case s.Version == 0 && s.Base != nil:
		res.Repaired = "the current config key was missing"
	}

	if err := writeHistory(ctx, st, keys.ConfigRevision(rev.Rev), doc); err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("recording revision %d in the history: %v", rev.Rev, err))
	}
	res.Warnings = append(res.Warnings, trimHistory(ctx, st, keys, ch.Config.Versioning.HistoryLimit)...)
	return res, nil
}

// mustEncodeProbe wraps YAML in a revision document so Decode checks it
// exactly as consumers will.
func mustEncodeProbe(data []byte) []byte {
	b, _ := encode(&Revision{Rev: 1, SHA256: Hash(data), YAML: string(data)})
	return b
}

// writeHistory creates key, or overwrites a stale entry under it.
func writeHistory(ctx context.Context, st topo.Store, key string, doc []byte) error {
	_, err := st.Create(ctx, key, doc)
	if !errors.Is(err, topo.ErrExists) {
		return err
	}
	kv, err := st.Get(ctx, key)
	if err != nil {
		return err
	}
	_, err = st.Update(ctx, key, doc, kv.Version)
	return err
}

// trimHistory deletes the oldest history entries beyond limit.
func trimHistory(ctx context.Context, st topo.Store, keys topo.Keys, limit int) []string {
	if limit < 1 {
		limit = config.DefaultHistoryLimit
	}
	kvs, err := st.List(ctx, keys.ConfigHistory())
	if err != nil {
		return []string{fmt.Sprintf("trimming the history: %v", err)}
	}
	var warns []string
	for i := 0; i < len(kvs)-limit; i++ {
		if err := st.Delete(ctx, kvs[i].Key, kvs[i].Version); err != nil && !errors.Is(err, topo.ErrNotFound) {
			warns = append(warns, fmt.Sprintf("trimming the history: delete %s: %v", kvs[i].Key, err))
		}
	}
	return warns
}

// Rollback applies the content of history revision to as a new revision
// (Source SourceRollback), through the same guard as Apply: ch.Config is
// ignored, the other fields apply. Errors as Apply, and an error wrapping
// topo.ErrNotFound when revision to is not in the history.
func Rollback(ctx context.Context, st topo.Store, keys topo.Keys, to int64, ch Change) (*Result, error) {
	_, cfg, err := Get(ctx, st, keys, to)
	if err != nil {
		return nil, err
	}
	ch.Config = cfg
	ch.Source = SourceRollback
	ch.RollbackOf = to
	return Apply(ctx, st, keys, ch)
}

// Bootstrap publishes the config `switchyard up --config FILE` starts with.
// When the store holds no valid config it creates the first revision from
// cfg (Source SourceBootstrap). When the store already holds a valid
// revision, that revision wins — like ProxySQL, which reads its config file
// only at the first start — and nothing is written: the result is the
// current revision with Unchanged set, and FileDiffers plus Diff (current →
// file) say whether the file would change anything, so `up` can warn that a
// restart did not undo a `config apply`. Use ApplyFile semantics (Apply with
// SourceBootstrap) to make the file win; a destructive file is then refused
// with a *RefusedError carrying the diff and the override.
func Bootstrap(ctx context.Context, st topo.Store, keys topo.Keys, cfg *config.Config, author string) (*Result, error) {
	if rev, cur, _, err := Current(ctx, st, keys); err == nil && rev != nil && cur != nil {
		d := config.ComputeDiff(cur, cfg)
		return &Result{Revision: rev, Previous: rev, Unchanged: true, FileDiffers: !d.Empty(), Diff: d, Running: cur}, nil
	}
	return BootstrapFromFile(ctx, st, keys, cfg, author)
}

// BootstrapFromFile applies cfg as a new revision (Source SourceBootstrap)
// through the guard even when the store holds a newer one: `switchyard up
// --apply-config-file`. It writes nothing when the current revision has the
// same content.
func BootstrapFromFile(ctx context.Context, st topo.Store, keys topo.Keys, cfg *config.Config, author string) (*Result, error) {
	return Apply(ctx, st, keys, Change{
		Config:       cfg,
		Reason:       "config file loaded by switchyard up at start",
		Author:       author,
		Source:       SourceBootstrap,
		OverrideHint: "the config file would remove routes that are in use; if that is intended, apply it with `switchyard config apply FILE --reason TEXT --allow-destructive`, then start again",
	})
}

// FileLoad is what `switchyard up` remembers of its config file: the
// content it last loaded and the revision current in the store then. A
// reload is based on that revision.
type FileLoad struct {
	// Path is the config file.
	Path string
	// SHA256 is the hex SHA-256 of the file's bytes when last loaded.
	SHA256 string
	// Rev is the store's current revision when the file was last loaded
	// (at start, or by the last reload that succeeded).
	Rev int64
}

// LoadedFile returns the FileLoad of path as read now, based on rev.
func LoadedFile(path string, rev int64) (FileLoad, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return FileLoad{}, fmt.Errorf("configstore: read %s: %w", path, err)
	}
	return FileLoad{Path: path, SHA256: Hash(b), Rev: rev}, nil
}

// Why a reload changed nothing (ReloadRefusedError.Kind).
const (
	// ReloadUnchanged: the file has the bytes it had when last loaded.
	ReloadUnchanged = "unchanged"
	// ReloadStale: the store's current revision is not the one the file was
	// loaded at: someone applied another revision meanwhile, and the file
	// would undo it.
	ReloadStale = "stale"
)

// ReloadRefusedError is a SIGHUP reload that was not applied because the
// file did not change since it was last loaded, or because it is not based
// on the store's current revision. Nothing was written.
type ReloadRefusedError struct {
	// Kind is ReloadUnchanged or ReloadStale.
	Kind string
	// Why says what happened and what to do, in words.
	Why string
	// Current is the store's current revision (nil when none is valid).
	Current *Revision
	// Diff is what applying the file would change against Current: for
	// ReloadStale, what it would undo.
	Diff config.Diff
}

// Error is Why, then the diff indented.
func (e *ReloadRefusedError) Error() string {
	var b strings.Builder
	b.WriteString("configstore: reload refused, nothing changed: " + e.Why)
	if !e.Diff.Empty() {
		b.WriteString("\nthe file against the current revision:\n")
		for _, l := range strings.Split(strings.TrimRight(e.Diff.String(), "\n"), "\n") {
			b.WriteString("  " + l + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// ReloadFile validates the config file last.Path and applies it (Source
// SourceReload) through the guard, for `switchyard up` on SIGHUP — only if
// the file changed since it was last loaded (last.SHA256) and the store's
// current revision is still last.Rev, the one the file was loaded at; the
// write is conditioned on that revision (Change.ExpectRev). So a SIGHUP
// never silently undoes another operator's `config apply`. It returns the
// FileLoad to remember for the next reload (last itself on error).
//
// Errors: *ReloadRefusedError (unchanged file, or a store revision newer
// than the file's base, with the diff); a bad file's validation errors
// (naming the file and field); *RefusedError from the guard (with the
// diff); ErrConflict when the revision changed between the check and the
// write. Nothing is written on any error.
func ReloadFile(ctx context.Context, st topo.Store, keys topo.Keys, last FileLoad, author string) (*Result, FileLoad, error) {
	path := last.Path
	now, err := LoadedFile(path, last.Rev)
	if err != nil {
		return nil, last, fmt.Errorf("configstore: reload refused, nothing changed: %w", err)
	}
	cfg, err := config.ValidateFile(path)
	if err != nil {
		return nil, last, fmt.Errorf("configstore: reload refused, nothing changed: %w", err)
	}
	rev, cur, loaded, err := Current(ctx, st, keys)
	if err != nil && loaded == nil { // the store did not answer (no valid revision is revision 0)
		return nil, last, fmt.Errorf("configstore: reload refused, nothing changed: read the current revision: %w", err)
	}
	var curRev int64
	if rev != nil {
		curRev = rev.Rev
	}
	d := config.ComputeDiff(cur, cfg)
	if now.SHA256 == last.SHA256 {
		why := fmt.Sprintf("%s has not changed since it was loaded (at revision %d); edit it first", path, last.Rev)
		if curRev != last.Rev && !d.Empty() {
			why += fmt.Sprintf("; the store has revision %d now, which this file would undo", curRev)
		}
		return nil, last, &ReloadRefusedError{Kind: ReloadUnchanged, Why: why, Current: rev, Diff: d}
	}
	if curRev != last.Rev {
		who := ""
		if rev != nil {
			who = fmt.Sprintf(" (%s by %s: %s)", rev.Source, rev.Author, rev.Reason)
		}
		why := fmt.Sprintf("the store's current config is revision %d%s, not revision %d that %s was loaded at: the file may undo it. "+
			"Apply the file deliberately with `switchyard config apply %s --reason TEXT` (review `switchyard config diff %s` first), "+
			"or start from the store's revision with `switchyard config show`", curRev, who, last.Rev, path, path, path)
		return nil, last, &ReloadRefusedError{Kind: ReloadStale, Why: why, Current: rev, Diff: d}
	}
	res, err := Apply(ctx, st, keys, Change{
		Config:       cfg,
		Reason:       "SIGHUP: reload of " + path,
		Author:       author,
		Source:       SourceReload,
		ExpectRev:    last.Rev,
		OverrideHint: "nothing changed; if the removal is intended, apply the file with `switchyard config apply " + path + " --reason TEXT --allow-destructive`",
	})
	if err != nil {
		return res, last, err
	}
	now.Rev = res.Revision.Rev
	return res, now, nil
}
