package weirpgx_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/weirdriver"
)

// TestKeyBucketMatchesDatabase: weirdriver.KeyBucket, by which a client keeps a
// claimed job's key within its buckets, gives every key the bucket the
// database's weir_key_bucket gives it, for keys of every sort: empty, numbers
// as JSON writes them, multibyte text, long text.
func TestKeyBucketMatchesDatabase(t *testing.T) {
	t.Parallel()
	_, pool, schema := readySetup(t)
	keys := []string{"", "0", "1", "-1.5e3", "true", `{"a": 1}`, "customer-42", "ü", "日本語", strings.Repeat("x", 5000)}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]rune, r.IntN(40))
		for i := range b {
			b[i] = rune(1 + r.IntN(0x2FFF))
		}
		keys = append(keys, string(b))
	}
	var got []int32
	if err := pool.QueryRow(t.Context(), `SELECT array(SELECT `+pgx.Identifier{schema, "weir_key_bucket"}.Sanitize()+
		`(k) FROM unnest($1::text[]) WITH ORDINALITY AS u(k, i) ORDER BY i)`, keys).Scan(&got); err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for i, k := range keys {
		want := weirdriver.KeyBucket(k)
		if int(got[i]) != want {
			t.Fatalf("key %q: the database's bucket %d, weirdriver.KeyBucket %d", k, got[i], want)
		}
		seen[want] = true
	}
	if len(seen) != weirdriver.KeyBuckets {
		t.Fatalf("%d keys fell into %d buckets, want all %d", len(keys), len(seen), weirdriver.KeyBuckets)
	}
}
