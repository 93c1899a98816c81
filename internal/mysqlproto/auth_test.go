package mysqlproto

import (
	"bytes"
	"errors"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

func TestNativePasswordMatchesReference(t *testing.T) {
	scramble := []byte("12345678901234567890")
	for _, pw := range []string{"secret", "p@ss w0rd", "x"} {
		stage1 := NativeStage1(pw)
		token := NativeToken(scramble, stage1)
		if ref := mysql.CalcNativePassword(scramble, []byte(pw)); !bytes.Equal(token, ref) {
			t.Fatalf("%q: token differs from go-mysql's CalcNativePassword", pw)
		}
		stage2 := NativeStage2(stage1)
		got, ok := VerifyNative(scramble, token, stage2)
		if !ok || got != stage1 {
			t.Fatalf("%q: verify failed or wrong stage1", pw)
		}
		wrong := NativeToken(scramble, NativeStage1(pw+"!"))
		if _, ok := VerifyNative(scramble, wrong, stage2); ok {
			t.Fatalf("%q: wrong password accepted", pw)
		}
		if _, ok := VerifyNative(scramble, token[:19], stage2); ok {
			t.Fatal("short token accepted")
		}
		// The recovered stage1 answers a different server's challenge.
		other := []byte("abcdefghijabcdefghij")
		if !bytes.Equal(NativeToken(other, got), mysql.CalcNativePassword(other, []byte(pw))) {
			t.Fatal("recovered stage1 does not answer another challenge")
		}
	}
}

func TestNativeHashParse(t *testing.T) {
	// PASSWORD('secret') in MySQL/MariaDB.
	const h = "*14E65567ABDB5135D0CFD9A70B3032C179A49EE7"
	stage2, err := ParseNativeHash(h)
	if err != nil {
		t.Fatal(err)
	}
	if stage2 != NativeStage2(NativeStage1("secret")) {
		t.Fatal("hash of 'secret' does not match SHA1(SHA1('secret'))")
	}
	if FormatNativeHash(stage2) != h {
		t.Fatalf("format: %s", FormatNativeHash(stage2))
	}
	lower, err := ParseNativeHash("*14e65567abdb5135d0cfd9a70b3032c179a49ee7")
	if err != nil || lower != stage2 {
		t.Fatal("lowercase hash")
	}
	for _, bad := range []string{"", "14E65567ABDB5135D0CFD9A70B3032C179A49EE7", "*14E6", "*ZZE65567ABDB5135D0CFD9A70B3032C179A49EE7"} {
		if _, err := ParseNativeHash(bad); !errors.Is(err, ErrBadPasswordHash) {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func TestNewScramble(t *testing.T) {
	a, err := NewScramble(ScrambleLen)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewScramble(ScrambleLen)
	if len(a) != ScrambleLen || bytes.Equal(a, b) {
		t.Fatal("scrambles not random or wrong length")
	}
	if bytes.IndexByte(a, 0) >= 0 || bytes.IndexByte(a, '$') >= 0 {
		t.Fatal("scramble contains NUL or '$'")
	}
}
