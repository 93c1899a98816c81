package proxy

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/switchyard-db/switchyard/internal/config"
	"github.com/switchyard-db/switchyard/internal/mysqlproto"
)

// Client authentication by plugin. The greeting always announces
// mysql_native_password with a 20-byte scramble (the user is not known
// yet); once the handshake response names the user, the proxy serves the
// account's plugin, switching the client to it (AuthSwitchRequest) when it
// answered with another:
//
//   - mysql_native_password: the token is checked against stage2, which
//     yields stage1 (mysqlproto.VerifyNative);
//   - ed25519 (MariaDB's auth_ed25519): a fresh 32-byte nonce, the client's
//     64-byte signature checked against the account's public key;
//   - caching_sha2_password (MySQL 8): the fast path against the cached
//     verifier (AuthMoreData 0x03, then OK), else full authentication
//     (AuthMoreData 0x04): the password in clear over TLS, or RSA-encrypted
//     with the proxy's key, which the client asks for with 0x02
//     (https://dev.mysql.com/doc/dev/mysql-server/latest/page_caching_sha2_authentication_exchanges.html).
//     The password is checked against stage2 and, on success, stage1 and
//     the verifier are kept for the next logins.
//
// A client that answers the greeting with caching_sha2_password (a MySQL 8
// client that does not take the announced plugin) logs into a
// mysql_native_password account by the fast path when the proxy knows the
// verifier (a plaintext source, or an earlier full authentication), and is
// switched to mysql_native_password otherwise. A client plugin other than
// the greeting's with no data (libmariadb drops a challenge made for
// another plugin) waits for the switch to the account's plugin.

// authState is the proxy's RSA key for caching_sha2_password full
// authentication: proxy.rsa_key_file, or generated when first needed.
type authState struct {
	once sync.Once
	file string
	key  *mysqlproto.RSAKey
	err  error
}

// rsaKey returns the key, loading or generating it on first use.
func (a *authState) rsaKey() (*mysqlproto.RSAKey, error) {
	a.once.Do(func() {
		if a.file != "" {
			a.key, a.err = mysqlproto.LoadRSAKey(a.file)
		} else {
			a.key, a.err = mysqlproto.NewRSAKey()
		}
	})
	return a.key, a.err
}

// onTLS reports whether the client connection is encrypted: caching_sha2
// full authentication takes the password in clear only then (the client
// switched to TLS at login, tls.go).
func (s *session) onTLS() bool { return s.tls }

// clientAuth is what a successful authentication gives the session.
type clientAuth struct {
	u      *userEntry
	stage1 [mysqlproto.HashLen]byte
	edKey  *[64]byte
}

// authClient authenticates user, whose first answer (token, made with
// plugin for scramble) came with sequence id seq-1. With fresh, a switch to
// another plugin uses a new scramble (COM_CHANGE_USER reuses the
// greeting's one only for the first answer). It returns the result and the
// sequence id of the next server packet, or a close reason after it
// answered the client with the error.
func (s *session) authClient(rc *runtimeConfig, user, plugin string, token, scramble []byte, seq byte, fresh bool) (clientAuth, byte, string) {
	u := rc.users[user]
	if u == nil {
		u = s.srv.passThrough(s.l.cluster, user, s.remote())
	}
	if u != nil && u.unsupported != "" {
		s.srv.metrics.authFailures.WithLabelValues(s.l.name).Inc()
		hint := "only mysql_native_password accounts pass through"
		if u.unsupported == "ed25519" {
			hint = "the proxy cannot sign the servers' challenges with a public key: list the user in users with auth_plugin ed25519 and its password"
		}
		s.writeError(seq, mysqlproto.NewError(mysql.ER_NOT_SUPPORTED_AUTH_MODE, fmt.Sprintf(
			"switchyard: account '%s'@'%s' uses authentication plugin %s, which the proxy cannot authenticate (%s)",
			user, u.host, u.unsupported, hint)))
		s.log.Repeated(slog.LevelInfo, "client login refused|unsupported plugin|"+s.l.name+"|"+user, "client login refused",
			"reason", "unsupported authentication plugin", "user", user, "plugin", u.unsupported)
		return clientAuth{}, seq, closeAuthFailed
	}
	want := config.AuthNative
	if u != nil {
		want = u.plugin
	}
	if plugin == mysqlproto.PluginCachingSHA2 && want == config.AuthNative && u != nil {
		// A client that chose caching_sha2_password: the fast path when
		// the verifier is known, else a switch to mysql_native_password
		// (full authentication would need TLS or the RSA exchange, which
		// not every client does unasked).
		if a, next, reason, ok := s.sha2Fast(u, scramble, token, seq); ok {
			return a, next, reason
		}
	}
	// switchTo asks the client to answer data with plugin name instead;
	// it returns the close reason when that fails.
	switchTo := func(name string, data []byte) string {
		var err error
		if token, seq, err = s.switchPlugin(seq, name, data); err != nil {
			s.logClientError("auth switch", err)
			return clientReason(err)
		}
		return ""
	}
	// A first answer without data from a client plugin other than the
	// greeting's mysql_native_password is no empty password: the client
	// dropped a challenge made for another plugin and waits for an
	// AuthSwitchRequest (libmariadb's run_plugin_auth; MariaDB's server
	// switches whenever the client's data is not for the account's
	// plugin, sql_acl.cc server_mpvio_read_packet). A caching_sha2_password
	// client sends data only when it took the greeting's scramble.
	noData := len(token) == 0 && plugin != "" && plugin != mysql.AUTH_NATIVE_PASSWORD
	sha2Switch := want == config.AuthSHA2 && (plugin != mysqlproto.PluginCachingSHA2 || noData)
	if fresh && (sha2Switch ||
		want == config.AuthNative && plugin != "" && plugin != mysql.AUTH_NATIVE_PASSWORD) {
		sc, err := mysqlproto.NewScramble(mysqlproto.ScrambleLen)
		if err != nil {
			s.writeError(seq, errUnknown("switchyard: cannot generate a handshake challenge"))
			return clientAuth{}, seq, closeServer
		}
		scramble = sc
	}
	switch want {
	case config.AuthEd25519:
		nonce, err := mysqlproto.NewEd25519Nonce()
		if err != nil {
			s.writeError(seq, errUnknown("switchyard: cannot generate a handshake challenge"))
			return clientAuth{}, seq, closeServer
		}
		if reason := switchTo(mysqlproto.PluginEd25519, nonce); reason != "" {
			return clientAuth{}, seq, reason
		}
		if !mysqlproto.Ed25519Verify(u.edPub, nonce, token) {
			s.denyAccess(seq, user, true, refusedBadPassword)
			return clientAuth{}, seq, closeAuthFailed
		}
		var s1 [mysqlproto.HashLen]byte
		if p := u.stage1.Load(); p != nil {
			s1 = *p
		}
		return clientAuth{u: u, stage1: s1, edKey: u.edKey}, seq, ""
	case config.AuthSHA2:
		if sha2Switch {
			if reason := switchTo(mysqlproto.PluginCachingSHA2, scramble); reason != "" {
				return clientAuth{}, seq, reason
			}
		}
		return s.sha2Auth(u, user, scramble, token, seq)
	}
	if plugin != "" && plugin != mysql.AUTH_NATIVE_PASSWORD {
		if reason := switchTo(mysql.AUTH_NATIVE_PASSWORD, scramble); reason != "" {
			return clientAuth{}, seq, reason
		}
	}
	known := u != nil
	u, stage1, ok := rc.verifyNative(u, scramble, token)
	if !ok {
		s.denyAccess(seq, user, len(token) > 0, passwordRefusal(known, len(token) > 0))
		return clientAuth{}, seq, closeAuthFailed
	}
	return clientAuth{u: u, stage1: stage1, edKey: u.edKey}, seq, ""
}

// passwordRefusal words why a mysql_native_password check failed: the user
// is not known (neither in users nor passed through), or the answer does not
// match.
func passwordRefusal(known, withPassword bool) string {
	switch {
	case !known:
		return refusedUnknownUser
	case !withPassword:
		return refusedNoPassword
	}
	return refusedBadPassword
}

// sha2Auth runs caching_sha2_password from the client's first token
// (sequence id seq-1): the fast path, else full authentication.
func (s *session) sha2Auth(u *userEntry, user string, scramble, token []byte, seq byte) (clientAuth, byte, string) {
	if u == nil {
		s.denyAccess(seq, user, len(token) > 0, refusedUnknownUser)
		return clientAuth{}, seq, closeAuthFailed
	}
	if u.empty {
		if len(token) != 0 {
			s.denyAccess(seq, user, true, refusedBadPassword)
			return clientAuth{}, seq, closeAuthFailed
		}
		return clientAuth{u: u}, seq, ""
	}
	if len(token) == 0 {
		s.denyAccess(seq, user, false, refusedNoPassword)
		return clientAuth{}, seq, closeAuthFailed
	}
	if a, next, reason, ok := s.sha2Fast(u, scramble, token, seq); ok {
		return a, next, reason
	}
	// Full authentication.
	p, next, err := s.exchange(seq, []byte{0x01, mysqlproto.SHA2FullAuth})
	if err != nil {
		s.logClientError("caching_sha2_password full authentication", err)
		return clientAuth{}, seq, clientReason(err)
	}
	seq = next
	var pw string
	switch {
	case s.onTLS():
		pw = mysqlproto.ClearPassword(p)
	case len(p) == 1 && p[0] == mysqlproto.SHA2RequestPublicKey:
		key, kerr := s.srv.auth.rsaKey()
		if kerr != nil {
			s.log.Error("caching_sha2_password: no RSA key", "err", kerr)
			s.writeError(seq, errUnknown("switchyard: the proxy has no RSA key for caching_sha2_password; connect over TLS or use mysql_native_password"))
			return clientAuth{}, seq, closeServer
		}
		enc, next, err := s.exchange(seq, append([]byte{0x01}, key.PEM...))
		if err != nil {
			s.logClientError("caching_sha2_password full authentication", err)
			return clientAuth{}, seq, clientReason(err)
		}
		seq = next
		if pw, err = key.DecryptPassword(scramble, enc); err != nil {
			s.denyAccess(seq, user, true, refusedUndecrypted)
			return clientAuth{}, seq, closeAuthFailed
		}
	default:
		// The password in clear without TLS (or an answer encrypted with
		// a key the client had pinned, which cannot be this proxy's
		// unless it is proxy.rsa_key_file's): try it as RSA.
		key, kerr := s.srv.auth.rsaKey()
		if kerr == nil {
			pw, kerr = key.DecryptPassword(scramble, p)
		}
		if kerr != nil {
			s.denyAccess(seq, user, true, refusedUndecrypted)
			return clientAuth{}, seq, closeAuthFailed
		}
	}
	s1 := mysqlproto.NativeStage1(pw)
	check := mysqlproto.NativeStage2(s1)
	if subtle.ConstantTimeCompare(check[:], u.stage2[:]) != 1 {
		s.denyAccess(seq, user, true, refusedBadPassword)
		return clientAuth{}, seq, closeAuthFailed
	}
	v := mysqlproto.SHA2Verifier(pw)
	u.sha2.Store(&v)
	if u.stage1.Load() == nil {
		u.stage1.Store(&s1)
	}
	return clientAuth{u: u, stage1: s1, edKey: u.edKey}, seq, ""
}

// sha2Fast tries caching_sha2_password's fast path for u (a password
// that is not empty): ok is false when the verifier is unknown or the token
// does not match it; else the fast-path success (AuthMoreData 0x03) was
// sent, or reason says why the session ends.
func (s *session) sha2Fast(u *userEntry, scramble, token []byte, seq byte) (a clientAuth, next byte, reason string, ok bool) {
	v, s1 := u.sha2.Load(), u.stage1.Load()
	if u.empty || v == nil || s1 == nil || !mysqlproto.SHA2VerifyFast(scramble, token, *v) {
		return clientAuth{}, seq, "", false
	}
	if err := s.writeDirect(seq, []byte{0x01, mysqlproto.SHA2FastAuthOK}); err != nil {
		return clientAuth{}, seq, closeClientGone, true
	}
	return clientAuth{u: u, stage1: *s1, edKey: u.edKey}, seq + 1, "", true
}

// switchPlugin sends an AuthSwitchRequest to plugin with data (sequence
// id seq) and returns the client's answer and the next sequence id.
func (s *session) switchPlugin(seq byte, plugin string, data []byte) ([]byte, byte, error) {
	if s.caps != 0 && s.caps&mysql.CLIENT_PLUGIN_AUTH == 0 {
		// The server's answer to such a client (ER_NOT_SUPPORTED_AUTH_MODE).
		s.writeError(seq, mysqlproto.NewError(mysql.ER_NOT_SUPPORTED_AUTH_MODE,
			"Client does not support authentication protocol requested by server; consider upgrading MariaDB client"))
		return nil, seq, fail(closeAuthFailed, errors.New("client cannot switch auth plugins"))
	}
	var pkt []byte
	if plugin == mysqlproto.PluginEd25519 {
		pkt = mysqlproto.AppendEd25519Switch(nil, data)
	} else {
		pkt = mysqlproto.AppendAuthSwitchRequest(nil, plugin, data)
	}
	return s.exchange(seq, pkt)
}

// exchange writes one connection-phase packet (sequence id seq) and reads
// the client's answer; it returns a copy of it and the next sequence id.
func (s *session) exchange(seq byte, payload []byte) ([]byte, byte, error) {
	if err := s.writeDirect(seq, payload); err != nil {
		return nil, seq, fail(closeClientGone, err)
	}
	p, rseq, err := mysqlproto.ReadPacket(s.cr, nil, handshakeMax)
	if err != nil {
		return nil, seq, err
	}
	return append([]byte(nil), p...), rseq + 1, nil
}

// verifyNative checks a mysql_native_password token for u (nil: an
// unknown user, refused after the same work) against scramble. It returns
// the user's stage1 (zero for an empty password) on success.
func (rc *runtimeConfig) verifyNative(u *userEntry, scramble, token []byte) (*userEntry, [mysqlproto.HashLen]byte, bool) {
	var zero [mysqlproto.HashLen]byte
	if u == nil {
		// Same SHA1 work as a real check, so timing does not reveal users.
		_, _ = mysqlproto.VerifyNative(scramble, token, zero)
		return nil, zero, false
	}
	if u.empty {
		return u, zero, len(token) == 0
	}
	s1, ok := mysqlproto.VerifyNative(scramble, token, u.stage2)
	if !ok {
		return nil, zero, false
	}
	if u.stage1.Load() == nil {
		u.stage1.Store(&s1)
	}
	return u, s1, true
}

// ed25519Answer signs a backend's client_ed25519 challenge as the
// session's user, or says why it cannot.
func (s *session) ed25519Answer(t *target, nonce []byte) ([]byte, *mysql.MyError) {
	if s.edKey == nil {
		return nil, errUnknown(fmt.Sprintf(
			"switchyard: backend %s asks for client_ed25519 for user %s and the proxy does not have its password: list the user in users with password_env or password_file",
			t.node, s.user))
	}
	return mysqlproto.Ed25519Sign(s.edKey, nonce), nil
}
