-- Every statement that inserts deliveries asks whether any app has a send-rate limit (the insert trigger of
-- migration 0015: `EXISTS (SELECT 1 FROM apps WHERE max_sends_per_second IS NOT NULL)`), and so do the claim's
-- token buckets and `status`. With no app limited that question read the whole apps table, once per expansion
-- chunk and bulk pass: a cost that grew with the number of tenants. This index holds only the limited apps, so
-- the answer is a look at an index that is usually empty.
CREATE INDEX apps_send_limited ON apps (id) WHERE max_sends_per_second IS NOT NULL;
