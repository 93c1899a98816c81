-- LOAD DATA LOCAL INFILE of a file the runner writes into the client's directory.
CREATE OR REPLACE TABLE cli_load (id INT, s VARCHAR(20));
LOAD DATA LOCAL INFILE 'cli-load.csv' INTO TABLE cli_load FIELDS TERMINATED BY ',';
SELECT COUNT(*), MIN(id), MAX(s) FROM cli_load;
