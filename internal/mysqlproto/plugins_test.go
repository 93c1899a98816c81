package mysqlproto

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"encoding/pem"
	"testing"
)

func TestEd25519SignVerify(t *testing.T) {
	pub := Ed25519PublicKey("secret")
	s := FormatEd25519Key(pub)
	if len(s) != 43 {
		t.Fatalf("key %q: %d characters, want 43", s, len(s))
	}
	back, err := ParseEd25519Key(s)
	if err != nil || !bytes.Equal(back, pub) {
		t.Fatalf("ParseEd25519Key(%q) = %x, %v", s, back, err)
	}
	nonce, err := NewEd25519Nonce()
	if err != nil {
		t.Fatal(err)
	}
	sec, wrong := Ed25519Secret("secret"), Ed25519Secret("Secret")
	sig := Ed25519Sign(&sec, nonce)
	if !Ed25519Verify(pub, nonce, sig) {
		t.Fatal("signature of the right password does not verify")
	}
	if Ed25519Verify(pub, nonce, Ed25519Sign(&wrong, nonce)) {
		t.Fatal("signature of a wrong password verifies")
	}
	other := append([]byte(nil), nonce...)
	other[0] ^= 1
	if Ed25519Verify(pub, other, sig) {
		t.Fatal("signature verifies for another nonce")
	}
	if Ed25519Verify(pub, nonce, sig[:63]) {
		t.Fatal("a short signature verifies")
	}
}

func TestParseEd25519KeyRejects(t *testing.T) {
	for _, s := range []string{"", "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19", "abc", "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"} {
		if _, err := ParseEd25519Key(s); err == nil {
			t.Errorf("ParseEd25519Key(%q) accepted", s)
		}
	}
}

func TestSHA2FastPath(t *testing.T) {
	scramble, _ := NewScramble(ScrambleLen)
	v := SHA2Verifier("pw")
	if !SHA2VerifyFast(scramble, SHA2Token(scramble, "pw"), v) {
		t.Fatal("right password refused")
	}
	if SHA2VerifyFast(scramble, SHA2Token(scramble, "pW"), v) {
		t.Fatal("wrong password accepted")
	}
	if SHA2VerifyFast(scramble, nil, v) {
		t.Fatal("empty token accepted")
	}
}

func TestRSAPasswordRoundTrip(t *testing.T) {
	k, err := NewRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(k.PEM)
	pubAny, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	scramble, _ := NewScramble(ScrambleLen)
	// What a client sends (go-sql-driver encryptPassword, libmysqlclient).
	plain := append([]byte("a long password, longer than the 20-byte scramble"), 0)
	for i := range plain {
		plain[i] ^= scramble[i%len(scramble)]
	}
	enc, err := rsa.EncryptOAEP(sha1.New(), rand.Reader, pubAny.(*rsa.PublicKey), plain, nil)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := k.DecryptPassword(scramble, enc)
	if err != nil || pw != "a long password, longer than the 20-byte scramble" {
		t.Fatalf("DecryptPassword = %q, %v", pw, err)
	}
	if _, err := k.DecryptPassword(scramble, enc[1:]); err == nil {
		t.Fatal("a damaged ciphertext decrypted")
	}
}

// FuzzParseEd25519Key: any input either fails or round-trips to the same
// 43-character form.
func FuzzParseEd25519Key(f *testing.F) {
	f.Add("ZIgUREUg5PVgQ6LskhXmO+eZLS0nC8be6HPjYWR4YJY")
	f.Add("ZIgUREUg5PVgQ6LskhXmO+eZLS0nC8be6HPjYWR4YJY=")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseEd25519Key(s)
		if err != nil {
			return
		}
		if back, err := ParseEd25519Key(FormatEd25519Key(k)); err != nil || !bytes.Equal(back, k) {
			t.Fatalf("%q: round trip %x, %v", s, back, err)
		}
	})
}

// The key MariaDB 10.11 stored for CREATE USER ... IDENTIFIED VIA ed25519
// USING PASSWORD('secret') (mysql.global_priv authentication_string).
func TestEd25519KeyAsMariaDBStoresIt(t *testing.T) {
	if got := FormatEd25519Key(Ed25519PublicKey("secret")); got != "ZIgUREUg5PVgQ6LskhXmO+eZLS0nC8be6HPjYWR4YJY" {
		t.Fatalf("public key of 'secret' = %s", got)
	}
}

// BenchmarkAuthCheck: the CPU one login costs the proxy per plugin (the
// check of a client's answer, and the answer to a backend's challenge).
func BenchmarkAuthCheck(b *testing.B) {
	scramble, _ := NewScramble(ScrambleLen)
	nonce, _ := NewEd25519Nonce()
	s1 := NativeStage1("pw")
	s2 := NativeStage2(s1)
	tok := NativeToken(scramble, s1)
	pub := Ed25519PublicKey("pw")
	sec := Ed25519Secret("pw")
	sig := Ed25519Sign(&sec, nonce)
	v := SHA2Verifier("pw")
	sha := SHA2Token(scramble, "pw")
	b.Run("native_verify", func(b *testing.B) {
		for b.Loop() {
			VerifyNative(scramble, tok, s2)
		}
	})
	b.Run("ed25519_verify", func(b *testing.B) {
		for b.Loop() {
			Ed25519Verify(pub, nonce, sig)
		}
	})
	b.Run("ed25519_sign_backend", func(b *testing.B) {
		for b.Loop() {
			Ed25519Sign(&sec, nonce)
		}
	})
	b.Run("sha2_fast_verify", func(b *testing.B) {
		for b.Loop() {
			SHA2VerifyFast(scramble, sha, v)
		}
	})
	key, err := NewRSAKey()
	if err != nil {
		b.Fatal(err)
	}
	blk, _ := pem.Decode(key.PEM)
	pubAny, _ := x509.ParsePKIXPublicKey(blk.Bytes)
	plain := []byte("pw\x00")
	for i := range plain {
		plain[i] ^= scramble[i%len(scramble)]
	}
	enc, _ := rsa.EncryptOAEP(sha1.New(), rand.Reader, pubAny.(*rsa.PublicKey), plain, nil)
	b.Run("sha2_full_rsa_decrypt", func(b *testing.B) {
		for b.Loop() {
			if _, err := key.DecryptPassword(scramble, enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
