-- workflows_crc32(text): CRC-32 of the text's UTF-8 bytes, as Python's zlib.crc32, so the
-- shard the one-call ack gives a run (ack_succeeded.sql) is the one runs/brokers/shards.py
-- shard_of gives it. Applied whole by a migration (workflows/sql/__init__.py).

CREATE OR REPLACE FUNCTION workflows_crc32(p text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  crc bigint := 4294967295;
  b bytea := convert_to(p, 'UTF8');
  i int;
  k int;
BEGIN
  FOR i IN 0 .. length(b) - 1 LOOP
    crc := crc # get_byte(b, i);
    FOR k IN 1 .. 8 LOOP
      IF (crc & 1) = 1 THEN
        crc := (crc >> 1) # 3988292384;
      ELSE
        crc := crc >> 1;
      END IF;
    END LOOP;
  END LOOP;
  RETURN crc # 4294967295;
END $$;
