package mysqlproto

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

func TestOKRoundTrip(t *testing.T) {
	state := append([]byte{SessionTrackSchema, 5, 4}, "test"...)
	cases := []struct {
		caps uint32
		ok   OK
	}{
		{0, OK{AffectedRows: 1, LastInsertID: 7, Status: mysql.SERVER_STATUS_AUTOCOMMIT}},
		{mysql.CLIENT_PROTOCOL_41, OK{AffectedRows: 1 << 40, LastInsertID: 300, Status: mysql.SERVER_STATUS_IN_TRANS, Warnings: 2,
			Info: []byte("Rows matched: 1  Changed: 1  Warnings: 0")}},
		{mysql.CLIENT_SESSION_TRACK, OK{Status: mysql.SERVER_SESSION_STATE_CHANGED | mysql.SERVER_STATUS_AUTOCOMMIT,
			Info: []byte{}, SessionState: state}},
		{mysql.CLIENT_SESSION_TRACK, OK{AffectedRows: 3, Status: mysql.SERVER_STATUS_AUTOCOMMIT, Info: []byte("x")}},
	}
	for i, c := range cases {
		p := AppendOK(nil, c.caps, &c.ok)
		got, err := ParseOK(p, c.caps)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		norm := func(o OK) OK {
			if len(o.Info) == 0 {
				o.Info = nil
			}
			return o
		}
		if !reflect.DeepEqual(norm(got), norm(c.ok)) {
			t.Fatalf("case %d:\n got %+v\nwant %+v", i, got, c.ok)
		}
		st, ok := OKStatus(p)
		if !ok || st != c.ok.Status {
			t.Fatalf("case %d: OKStatus %x %v", i, st, ok)
		}
		term := AppendOKTerminator(nil, c.caps, &c.ok)
		if term[0] != 0xfe {
			t.Fatal("terminator header")
		}
		if got2, err := ParseOK(term, c.caps); err != nil || got2.Status != c.ok.Status {
			t.Fatalf("case %d terminator: %+v %v", i, got2, err)
		}
	}
}

func TestSessionStateChanges(t *testing.T) {
	var b []byte
	b = append(b, SessionTrackSystemVariables)
	entry := mysql.AppendLengthEncodedInteger(nil, 10)
	entry = append(entry, "autocommit"...)
	entry = mysql.AppendLengthEncodedInteger(entry, 3)
	entry = append(entry, "OFF"...)
	b = mysql.AppendLengthEncodedInteger(b, uint64(len(entry)))
	b = append(b, entry...)
	b = append(b, SessionTrackSchema, 7, 6)
	b = append(b, "sbtest"...)
	ch, err := SessionStateChanges(b)
	if err != nil || len(ch) != 2 {
		t.Fatalf("%v %v", ch, err)
	}
	if n, v, ok := ch[0].SystemVariable(); !ok || n != "autocommit" || v != "OFF" {
		t.Fatalf("sysvar %q %q %v", n, v, ok)
	}
	if s, ok := ch[1].Schema(); !ok || s != "sbtest" {
		t.Fatalf("schema %q %v", s, ok)
	}
	if _, err := SessionStateChanges([]byte{1, 9, 1}); err == nil {
		t.Fatal("truncated entry accepted")
	}
}

func TestERRRoundTrip(t *testing.T) {
	p := AppendERR(nil, mysql.ER_ACCESS_DENIED_ERROR, "28000", "Access denied for user 'x'@'127.0.0.1' (using password: YES)")
	e := ParseERR(p)
	if e.Code != 1045 || e.State != "28000" || e.Message != "Access denied for user 'x'@'127.0.0.1' (using password: YES)" {
		t.Fatalf("%+v", e)
	}
	if e := ParseERR(AppendERR(nil, 1105, "", "m")); e.State != "HY000" {
		t.Fatalf("default state %q", e.State)
	}
	// Pre-4.1 layout: no '#' marker.
	if e := ParseERR([]byte{0xff, 0x19, 0x04, 'h', 'i'}); e.Code != 1049 || e.Message != "hi" || e.State != "HY000" {
		t.Fatalf("old layout %+v", e)
	}
	if e := ParseERR([]byte{0xff}); e.Code != 2027 {
		t.Fatalf("short packet %+v", e)
	}
	if e := NewError(mysql.ER_UNKNOWN_COM_ERROR, "Unknown command"); e.State != "08S01" {
		t.Fatalf("NewError state %q", e.State)
	}
}

func TestEOFRoundTrip(t *testing.T) {
	p := AppendEOF(nil, 3, mysql.SERVER_MORE_RESULTS_EXISTS)
	w, s, ok := ParseEOF(p)
	if !ok || w != 3 || s != mysql.SERVER_MORE_RESULTS_EXISTS {
		t.Fatalf("%d %x %v", w, s, ok)
	}
	if _, _, ok := ParseEOF(append(p, 0, 0, 0, 0)); ok {
		t.Fatal("9-byte packet taken for EOF")
	}
}

func TestStmtPrepareOKRoundTrip(t *testing.T) {
	r := StmtPrepareOK{StatementID: 77, Columns: 3, Params: 2, Warnings: 1}
	got, err := ParseStmtPrepareOK(AppendStmtPrepareOK(nil, r))
	if err != nil || got != r {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestReadLenEnc(t *testing.T) {
	for _, v := range []uint64{0, 250, 251, 0xffff, 0x10000, 0xffffff, 0x1000000, 1<<64 - 1} {
		b := mysql.AppendLengthEncodedInteger(nil, v)
		got, n, ok := ReadLenEnc(b)
		if !ok || got != v || n != len(b) {
			t.Fatalf("%d: %d %d %v", v, got, n, ok)
		}
		if _, _, ok := ReadLenEnc(b[:len(b)-1]); ok && len(b) > 1 {
			t.Fatalf("%d: truncated accepted", v)
		}
	}
	if _, _, ok := ReadLenEnc([]byte{0xfb}); ok {
		t.Fatal("NULL accepted as integer")
	}
}

// FuzzParseOKERR: arbitrary payloads never panic in the OK/ERR/EOF parsers,
// and an accepted OK re-encodes to something that parses to the same fields.
func FuzzParseOKERR(f *testing.F) {
	f.Add(AppendOK(nil, mysql.CLIENT_SESSION_TRACK, &OK{Status: mysql.SERVER_SESSION_STATE_CHANGED, SessionState: []byte{1, 2, 1, 'a'}}), true)
	f.Add(AppendERR(nil, 1064, "42000", "syntax"), false)
	f.Add(AppendEOF(nil, 0, 2), false)
	f.Fuzz(func(t *testing.T, p []byte, track bool) {
		var caps uint32 = mysql.CLIENT_PROTOCOL_41
		if track {
			caps |= mysql.CLIENT_SESSION_TRACK
		}
		_ = ParseERR(p)
		_, _, _ = ParseEOF(p)
		_, _ = ParseStmtPrepareOK(p)
		st, stOK := OKStatus(p)
		ok, err := ParseOK(p, caps)
		if err != nil {
			return
		}
		if !stOK || st != ok.Status {
			t.Fatalf("OKStatus %x/%v disagrees with ParseOK %x", st, stOK, ok.Status)
		}
		_, _ = SessionStateChanges(ok.SessionState)
		again, err := ParseOK(AppendOK(nil, caps, &ok), caps)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if again.AffectedRows != ok.AffectedRows || again.LastInsertID != ok.LastInsertID ||
			again.Status != ok.Status || again.Warnings != ok.Warnings || !bytes.Equal(again.Info, ok.Info) {
			t.Fatalf("round trip: %+v vs %+v", again, ok)
		}
	})
}
