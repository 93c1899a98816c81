package mysqlproto

import "testing"

func TestColumnCount(t *testing.T) {
	for _, tc := range []struct {
		p         []byte
		cacheMeta bool
		n         uint64
		meta, ok  bool
	}{
		{[]byte{3}, false, 3, true, true},
		{[]byte{3, 1}, true, 3, true, true},
		{[]byte{3, 0}, true, 3, false, true},
		{[]byte{0xfc, 0x2c, 0x01, 0}, true, 300, false, true},
		{[]byte{3}, true, 0, false, false},       // the metadata byte is missing
		{[]byte{3, 2}, true, 0, false, false},    // not 0 or 1
		{[]byte{3, 1, 0}, true, 0, false, false}, // trailing byte
		{[]byte{0xfb}, false, 0, false, false},
		{nil, false, 0, false, false},
	} {
		n, meta, ok := ColumnCount(tc.p, tc.cacheMeta)
		if n != tc.n || meta != tc.meta || ok != tc.ok {
			t.Errorf("ColumnCount(%x, %v) = %d, %v, %v; want %d, %v, %v", tc.p, tc.cacheMeta, n, meta, ok, tc.n, tc.meta, tc.ok)
		}
	}
}

func TestIsProgressAndBulkFlags(t *testing.T) {
	if !IsProgress([]byte{0xff, 0xff, 0xff, 1, 1, 2, 0, 0, 0, 0}) {
		t.Error("a progress report not recognised")
	}
	if IsProgress([]byte{0xff, 0x15, 0x04, '#'}) { // ERR 1045
		t.Error("an ERR packet taken for a progress report")
	}
	if f, ok := BulkFlags([]byte{ComStmtBulkExecute, 1, 0, 0, 0, 128, 0}); !ok || f != MariaDBBulkSendTypes {
		t.Errorf("BulkFlags = %d, %v", f, ok)
	}
	if _, ok := BulkFlags([]byte{ComStmtBulkExecute, 1, 0, 0, 0}); ok {
		t.Error("BulkFlags of a truncated packet")
	}
}
