-- A 17 MiB value from the server (packets split at 16 MiB - 1) and a large result.
SELECT MD5(REPEAT('ab', 9 * 1024 * 1024)), LENGTH(REPEAT('ab', 9 * 1024 * 1024));
SELECT REPEAT('ab', 9 * 1024 * 1024) AS big;
SELECT COUNT(*), SUM(seq) FROM seq_1_to_1000000;
SELECT seq, REPEAT('r', 50) FROM seq_1_to_20000;
