package topo

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
)

// Integrity of the documents consumers act on. Anyone who can write to etcd
// can write a config revision or a cluster state; with an integrity keyring
// the writers (config apply, the controller) append a keyed MAC to each such
// document and every consumer refuses one whose MAC does not verify. The key
// is read from the local config's etcd.integrity_key_env or
// etcd.integrity_key_file and is never stored in etcd.
//
// A signed document is the JSON object as written without the MAC, with one
// more member appended at its end:
//
//	{...,"mac":"hmac-sha256:KEYID:HEX"}
//
// HEX is HMAC-SHA256(key, domain || 0x00 || the object without the member),
// so it covers every byte of the document (for a revision: its number,
// author, guard flag, YAML); the domain (IntegrityConfigRevision,
// IntegrityClusterState, IntegrityOperatorRequest) keeps a signed document of one kind from passing
// as another. KEYID is the first 8 hex digits of SHA-256(key): which key of
// the keyring signed. Readers without a keyring ignore the member.

// Integrity domains, one per kind of signed document.
const (
	IntegrityConfigRevision = "switchyard config revision v1"
	IntegrityClusterState   = "switchyard cluster state v1"
	// IntegrityOperatorRequest: an operator request (switchover,
	// failover, maintenance, ack) as the CLI, the admin API or the
	// controller leader writes it.
	IntegrityOperatorRequest = "switchyard operator request v1"
)

// MinIntegrityKeyLen is the shortest integrity key accepted, in bytes.
const MinIntegrityKeyLen = 16

// ErrIntegrity wraps every verification failure of a signed document: it
// carries no MAC while a keyring is configured, its MAC is malformed, or it
// does not verify with any key of the keyring.
var ErrIntegrity = errors.New("integrity check failed")

// Keyring holds the integrity keys: the first signs, every one verifies
// (key rotation: add the new key first on every process, then drop the old
// one once every document was rewritten).
type Keyring struct {
	keys [][]byte
	ids  []string
}

// NewKeyring returns a keyring of keys (first signs). Each key must be at
// least MinIntegrityKeyLen bytes; at least one is required.
func NewKeyring(keys ...[]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("topo: integrity keyring: no key given")
	}
	kr := &Keyring{}
	for i, k := range keys {
		if len(k) < MinIntegrityKeyLen {
			return nil, fmt.Errorf("topo: integrity key %d is %d bytes; at least %d are required", i+1, len(k), MinIntegrityKeyLen)
		}
		kr.keys = append(kr.keys, bytes.Clone(k))
		kr.ids = append(kr.ids, keyID(k))
	}
	return kr, nil
}

// SigningKeyID is the KEYID of the key that signs.
func (kr *Keyring) SigningKeyID() string { return kr.ids[0] }

// Len is the number of keys.
func (kr *Keyring) Len() int { return len(kr.keys) }

func keyID(k []byte) string {
	s := sha256.Sum256(k)
	return hex.EncodeToString(s[:4])
}

func mac(key []byte, domain string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(domain))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

const macMember = `"mac":"`
const macScheme = "hmac-sha256:"

// Sign appends the MAC member to doc, a JSON object as json.Marshal writes
// it (no trailing white space). doc itself is not modified.
func (kr *Keyring) Sign(domain string, doc []byte) ([]byte, error) {
	if len(doc) < 2 || doc[0] != '{' || doc[len(doc)-1] != '}' {
		return nil, errors.New("topo: sign: the document is not a JSON object")
	}
	sum := mac(kr.keys[0], domain, doc)
	out := make([]byte, 0, len(doc)+100)
	out = append(out, doc[:len(doc)-1]...)
	if len(doc) > 2 {
		out = append(out, ',')
	}
	out = append(out, macMember...)
	out = append(out, macScheme...)
	out = append(out, kr.ids[0]...)
	out = append(out, ':')
	out = append(out, hex.EncodeToString(sum)...)
	out = append(out, '"', '}')
	return out, nil
}

// Verify checks the MAC of value, a document written by Sign, and returns
// the document without its MAC member (the bytes that were signed). The
// error wraps ErrIntegrity and says what failed; it never contains the
// document.
func (kr *Keyring) Verify(domain string, value []byte) ([]byte, error) {
	v := bytes.TrimSpace(value)
	i := bytes.LastIndex(v, []byte(macMember))
	if i < 0 || !bytes.HasSuffix(v, []byte(`"}`)) {
		if bytes.Contains(v, []byte(`"mac"`)) {
			// A "mac" member, but not as the last member in the exact
			// bytes Sign writes: the document was re-serialized (spaces,
			// member order) or edited; the MAC covers the exact bytes.
			return nil, fmt.Errorf("%w: the document has a \"mac\" member but not as switchyard writes it (last member, no spaces): it was re-serialized or edited after it was signed", ErrIntegrity)
		}
		return nil, fmt.Errorf("%w: the document carries no MAC (written without the integrity key, or not by switchyard)", ErrIntegrity)
	}
	tag := string(v[i+len(macMember) : len(v)-2])
	var id, sumHex string
	if rest, ok := cutPrefix(tag, macScheme); ok && len(rest) > 9 && rest[8] == ':' {
		id, sumHex = rest[:8], rest[9:]
	}
	sum, err := hex.DecodeString(sumHex)
	if id == "" || err != nil || len(sum) != sha256.Size {
		return nil, fmt.Errorf("%w: malformed MAC", ErrIntegrity)
	}
	body := bytes.TrimRight(v[:i], " \t\r\n")
	body = bytes.TrimSuffix(body, []byte(","))
	body = append(bytes.Clone(body), '}')
	for j, k := range kr.keys {
		if kr.ids[j] != id {
			continue
		}
		if hmac.Equal(mac(k, domain, body), sum) {
			return body, nil
		}
		return nil, fmt.Errorf("%w: the MAC does not match the content (key %s); the document was changed after it was signed", ErrIntegrity, id)
	}
	return nil, fmt.Errorf("%w: signed with key %s, which is not in this process's keyring (keys: %v)", ErrIntegrity, id, kr.ids)
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

// integrityKeys is the process's keyring; nil: documents are neither signed
// nor verified.
var integrityKeys atomic.Pointer[Keyring]

// SetIntegrity sets the process's integrity keyring (nil: none). Every
// role and operator command sets it once at start, from the local config,
// before it reads or writes the store. Tests that set it reset it.
func SetIntegrity(kr *Keyring) { integrityKeys.Store(kr) }

// Integrity returns the process's integrity keyring, nil when none is set.
func Integrity() *Keyring { return integrityKeys.Load() }

// SignDocument signs doc for domain with the process's keyring, or returns
// it unchanged when no keyring is set.
func SignDocument(domain string, doc []byte) ([]byte, error) {
	kr := Integrity()
	if kr == nil {
		return doc, nil
	}
	return kr.Sign(domain, doc)
}

// VerifyDocument verifies value for domain with the process's keyring.
// Without a keyring it returns nil: nothing is checked.
func VerifyDocument(domain string, value []byte) error {
	kr := Integrity()
	if kr == nil {
		if f := unverifiedSigned.Load(); f != nil && bytes.Contains(value, []byte(macMember+macScheme)) {
			(*f)()
		}
		return nil
	}
	_, err := kr.Verify(domain, value)
	return err
}

func errorsIsIntegrity(err error) bool { return errors.Is(err, ErrIntegrity) }

// unverifiedSigned is called when a signed document is read without a
// keyring (OnUnverifiedSigned).
var unverifiedSigned atomic.Pointer[func()]

// OnUnverifiedSigned sets f to be called each time VerifyDocument reads a
// signed document while no keyring is set (an operator command then says
// once that it cannot verify); nil: nothing is called.
func OnUnverifiedSigned(f func()) {
	if f == nil {
		unverifiedSigned.Store(nil)
		return
	}
	unverifiedSigned.Store(&f)
}
