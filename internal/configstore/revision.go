package configstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/topo"
)

// Revision sources, the Source of a Revision.
const (
	SourceApply     = "apply"     // switchyard config apply
	SourceRollback  = "rollback"  // switchyard config rollback
	SourceBootstrap = "bootstrap" // switchyard up --config FILE at start
	SourceReload    = "reload"    // switchyard up on SIGHUP
)

// Revision is one applied config: the document stored (as JSON) at
// topo.Keys.Config() for the current revision and at
// topo.Keys.ConfigRevision(Rev) in the history.
type Revision struct {
	// Rev numbers revisions 1, 2, 3, ... in the order they were applied; a
	// rollback is a new revision with the content of an old one.
	Rev int64 `json:"rev"`
	// Parent is the revision this one replaced (0 for the first).
	Parent int64 `json:"parent"`
	// Author is who applied it, "user@host".
	Author string `json:"author"`
	// Time is when it was applied.
	Time time.Time `json:"time"`
	// Reason is the operator's reason (--reason), or what applied it.
	Reason string `json:"reason"`
	// Source is SourceApply, SourceRollback, SourceBootstrap or SourceReload.
	Source string `json:"source"`
	// RollbackOf is the revision whose content a rollback restored.
	RollbackOf int64 `json:"rollback_of,omitempty"`
	// SHA256 is the hex SHA-256 of YAML. Consumers refuse a document whose
	// content does not hash to it.
	SHA256 string `json:"sha256"`
	// GuardOverridden is true when the change was applied with
	// --allow-destructive over the violations in GuardViolations.
	GuardOverridden bool `json:"guard_overridden"`
	// GuardViolations are the guard's reasons that were overridden.
	GuardViolations []string `json:"guard_violations,omitempty"`
	// YAML is the config, as config.Config.Marshal writes it (defaults
	// applied, file paths absolute). It may hold secrets: never log it.
	YAML string `json:"yaml,omitempty"`
	// Refused is set only in listings (State.History), never stored: why
	// the history document was not accepted — "integrity" when its MAC does
	// not verify with the integrity keyring (a forgery, or written without
	// the key), else "invalid: " and the reason. "" for a valid revision.
	Refused string `json:"refused,omitempty"`
}

// Meta returns the revision without its YAML, for listings.
func (r Revision) Meta() Revision {
	r.YAML = ""
	return r
}

// ShortHash is the first 12 hex digits of SHA256.
func (r Revision) ShortHash() string {
	if len(r.SHA256) > 12 {
		return r.SHA256[:12]
	}
	return r.SHA256
}

// Hash returns the hex SHA-256 of data.
func Hash(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// ErrEmptyValue: the stored value is empty (or only white space).
var ErrEmptyValue = errors.New("the stored value is empty")

// Decode checks a stored revision document: it is JSON, names a revision
// number, carries a MAC that verifies with the process's integrity keyring
// (topo.Integrity; errors wrap topo.ErrIntegrity; nothing is checked when
// no keyring is set), its YAML hashes to its SHA256, parses strictly and passes
// config.Validate. It returns the revision (also with an error, when the
// JSON itself decoded, so the error can name the revision) and the parsed
// config. Errors never contain the YAML.
func Decode(value []byte) (*Revision, *config.Config, error) {
	trimmed := bytes.TrimSpace(value)
	if len(trimmed) == 0 {
		return nil, nil, ErrEmptyValue
	}
	var r Revision
	if trimmed[0] != '{' || json.Unmarshal(trimmed, &r) != nil {
		return nil, nil, notADocument(trimmed)
	}
	if r.Rev <= 0 {
		return &r, nil, fmt.Errorf("the revision document has no revision number (rev %d)", r.Rev)
	}
	if err := topo.VerifyDocument(topo.IntegrityConfigRevision, trimmed); err != nil {
		return &r, nil, fmt.Errorf("revision %d: %w", r.Rev, err)
	}
	if got := Hash([]byte(r.YAML)); got != r.SHA256 {
		return &r, nil, fmt.Errorf("revision %d: content hash mismatch: the document says sha256 %q, its YAML hashes to %s (edited by hand?)", r.Rev, clip(r.SHA256), got[:12])
	}
	cfg, err := config.Parse([]byte(r.YAML))
	if err != nil {
		if errors.Is(err, config.ErrEmpty) {
			return &r, nil, fmt.Errorf("revision %d: the config is empty", r.Rev)
		}
		return &r, nil, fmt.Errorf("revision %d: %w", r.Rev, err)
	}
	if err := cfg.Validate(); err != nil {
		return &r, nil, fmt.Errorf("revision %d: invalid config: %s", r.Rev, oneLine(err.Error()))
	}
	return &r, cfg, nil
}

// notADocument explains a value that is not a revision document, telling a
// bare YAML config (written by hand into etcd) from garbage.
func notADocument(value []byte) error {
	const doc = "not a config revision document (configs are written by `switchyard config apply`)"
	cfg, err := config.Parse(value)
	switch {
	case err == nil:
		if verr := cfg.Validate(); verr != nil {
			return fmt.Errorf("%s: a bare YAML config, and an invalid one: %s", doc, oneLine(verr.Error()))
		}
		return fmt.Errorf("%s: a bare YAML config", doc)
	case value[0] == '{':
		return fmt.Errorf("%s: malformed JSON", doc)
	default:
		return fmt.Errorf("%s: %d bytes of unrecognised content", doc, len(value))
	}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

func clip(s string) string {
	if len(s) > 16 {
		return s[:16] + "..."
	}
	return s
}

// encode marshals a revision document, signed with the process's
// integrity keyring when one is set (topo.SignDocument).
func encode(r *Revision) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("configstore: encode revision %d: %w", r.Rev, err)
	}
	if b, err = topo.SignDocument(topo.IntegrityConfigRevision, b); err != nil {
		return nil, fmt.Errorf("configstore: sign revision %d: %w", r.Rev, err)
	}
	return b, nil
}

// Author returns "user@host" for the current process, for Revision.Author.
func Author() string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" {
		name = os.Getenv("USER")
	}
	if name == "" {
		name = "uid" + strconv.Itoa(os.Getuid())
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return name + "@" + host
}

// State is what the store holds: the current revision and the base the
// next change is compared with.
type State struct {
	// Current is the current revision; nil when the key is missing or does
	// not hold a valid revision (CurrentErr says why).
	Current *Revision
	// CurrentConfig is Current's parsed config.
	CurrentConfig *config.Config
	// Version is the current key's version, the compare-and-swap expectation
	// of the next write (0: the key does not exist).
	Version topo.Version
	// CurrentErr says why the current key's value is not a valid revision
	// (someone wrote into etcd directly); nil when it is valid or missing.
	CurrentErr error
	// Base is what a change is compared with and what consumers serve:
	// Current when valid, else the newest valid revision of the history; nil
	// when there is none.
	Base *Revision
	// BaseConfig is Base's parsed config.
	BaseConfig *config.Config
	// NextRev is the number the next revision gets: one more than any
	// revision seen in the current key, the history or the reports of the
	// running consumers (the revision each serves).
	NextRev int64
	// History is every revision in the history, oldest first (documents that
	// are not JSON revision documents are left out; those that are but fail
	// their checks are listed with Refused set).
	History []Revision
	// historyVersions maps a revision to its history key's version.
	historyVersions map[int64]topo.Version
}

// Load reads the current revision and the history.
func Load(ctx context.Context, st topo.Store, keys topo.Keys) (*State, error) {
	s := &State{historyVersions: map[int64]topo.Version{}}
	var maxRev int64
	kv, err := st.Get(ctx, keys.Config())
	switch {
	case errors.Is(err, topo.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("configstore: read %s: %w", keys.Config(), err)
	default:
		s.Version = kv.Version
		r, cfg, derr := Decode(kv.Value)
		if r != nil {
			maxRev = r.Rev
		}
		if derr != nil {
			s.CurrentErr = derr
		} else {
			s.Current, s.CurrentConfig = r, cfg
			s.Base, s.BaseConfig = r, cfg
		}
	}
	kvs, err := st.List(ctx, keys.ConfigHistory())
	if err != nil {
		return nil, fmt.Errorf("configstore: list %s: %w", keys.ConfigHistory(), err)
	}
	var newestValid *Revision
	var newestCfg *config.Config
	for _, hkv := range kvs {
		r, cfg, derr := Decode(hkv.Value)
		if r == nil {
			continue
		}
		maxRev = max(maxRev, r.Rev)
		meta := r.Meta()
		meta.Refused = ""
		switch {
		case derr == nil:
		case errors.Is(derr, topo.ErrIntegrity):
			meta.Refused = "integrity"
		default:
			meta.Refused = "invalid: " + oneLine(derr.Error())
		}
		s.History = append(s.History, meta)
		s.historyVersions[r.Rev] = hkv.Version
		if derr == nil && (newestValid == nil || r.Rev > newestValid.Rev) {
			newestValid, newestCfg = r, cfg
		}
	}
	if s.Current != nil && newestValid != nil && s.Current.Rev < newestValid.Rev && topo.Integrity() != nil {
		// A signed revision older than the history's newest written back
		// as current: a replay (`config rollback` writes a new number).
		s.CurrentErr = fmt.Errorf("%w: revision %d is older than revision %d of the history (a replayed signed revision; `config rollback` writes old content under a new number)", topo.ErrIntegrity, s.Current.Rev, newestValid.Rev)
		s.Current, s.CurrentConfig, s.Base, s.BaseConfig = nil, nil, nil, nil
	}
	if s.Base == nil && newestValid != nil {
		s.Base, s.BaseConfig = newestValid, newestCfg
	}
	// The revisions running consumers serve count too: after the store
	// was wiped or restored from an older backup, a number at or below
	// one of theirs would be refused by them as a replayed revision.
	if ckvs, err := st.List(ctx, keys.ConfigConsumers()); err == nil {
		for _, ckv := range ckvs {
			var c Status
			if json.Unmarshal(ckv.Value, &c) == nil {
				maxRev = max(maxRev, c.AppliedRev)
			}
		}
	}
	s.NextRev = maxRev + 1
	return s, nil
}

// Current returns the revision consumers should serve and its config: the
// current revision when valid, else the newest valid one of the history
// (state.CurrentErr then says what is wrong with the current key; Follow
// raises the alarm for it). It fails when the store holds no valid
// revision at all, saying how to create one.
func Current(ctx context.Context, st topo.Store, keys topo.Keys) (*Revision, *config.Config, *State, error) {
	s, err := Load(ctx, st, keys)
	if err != nil {
		return nil, nil, nil, err
	}
	if s.Base == nil {
		why := "it is empty"
		if s.CurrentErr != nil {
			why = s.CurrentErr.Error()
		}
		return nil, nil, s, fmt.Errorf("configstore: no valid config revision in etcd at %s (%s): run `switchyard up --config FILE` or `switchyard config apply FILE --reason TEXT`", keys.Config(), why)
	}
	return s.Base, s.BaseConfig, s, nil
}

// Get reads revision rev from the history (or the current key if it holds
// rev). It fails with an error naming the revisions kept when rev is not
// there.
func Get(ctx context.Context, st topo.Store, keys topo.Keys, rev int64) (*Revision, *config.Config, error) {
	kv, err := st.Get(ctx, keys.ConfigRevision(rev))
	if err == nil {
		r, cfg, derr := Decode(kv.Value)
		if derr != nil {
			return r, nil, fmt.Errorf("configstore: history entry %d: %w", rev, derr)
		}
		return r, cfg, nil
	}
	if !errors.Is(err, topo.ErrNotFound) {
		return nil, nil, fmt.Errorf("configstore: read revision %d: %w", rev, err)
	}
	s, lerr := Load(ctx, st, keys)
	if lerr != nil {
		return nil, nil, lerr
	}
	if s.Current != nil && s.Current.Rev == rev {
		return s.Current, s.CurrentConfig, nil
	}
	kept := "none"
	if n := len(s.History); n > 0 {
		kept = fmt.Sprintf("%d..%d", s.History[0].Rev, s.History[n-1].Rev)
	}
	return nil, nil, fmt.Errorf("configstore: revision %d is not in the history (kept: %s): %w", rev, kept, topo.ErrNotFound)
}

func isNotFound(err error) bool { return errors.Is(err, topo.ErrNotFound) }
