-- Demo data for `make demo`. psql variables: key (PKCS#8 PEM of the .p8), team, key_id, endpoint (emulator),
-- vapid_key (PKCS#8 PEM of a P-256 key), web_subscriptions (the TSV text `pushizo-worker emulator-subscription`
-- prints: id, endpoint, p256dh, auth), fcm_key (PKCS#8 PEM of an RSA key), fcm_email (its service account's
-- client_email, trusted by the emulator).
-- Token conventions of the emulator (docs/emulator.md) make some deliveries fail or retry on purpose.
\set ON_ERROR_STOP on
BEGIN;

INSERT INTO apps (id, name, default_language, default_timezone)
VALUES ('00000000-0000-4000-8000-00000000d3e0', 'Pushizo demo', 'en', 'Europe/Istanbul');

INSERT INTO app_channels (app_id, provider, settings, endpoint)
VALUES ('00000000-0000-4000-8000-00000000d3e0', 'apns',
        jsonb_build_object('team_id', :'team', 'key_id', :'key_id', 'private_key', :'key',
                           'topic', 'dev.pushizo.demo'),
        :'endpoint');

-- FCM: a Google service account whose token_uri is the emulator's token endpoint, and the channel's endpoint
-- is the emulator instead of https://fcm.googleapis.com.
INSERT INTO app_channels (app_id, provider, settings, endpoint)
VALUES ('00000000-0000-4000-8000-00000000d3e0', 'fcm',
        jsonb_build_object('service_account', jsonb_build_object(
            'type', 'service_account', 'project_id', 'pushizo-demo', 'client_email', :'fcm_email',
            'private_key', :'fcm_key', 'token_uri', :'endpoint' || '/token')),
        :'endpoint');

INSERT INTO users (app_id, external_id, tags)
SELECT '00000000-0000-4000-8000-00000000d3e0', format('user-%s', lpad(n::text, 3, '0')),
       jsonb_build_object('first_name', (ARRAY['Ayşe','John','Jürgen','João','Yuki','Élodie','Lucía'])[1 + n % 7],
                          'level', n % 10)
FROM generate_series(1, 120) AS n;

-- 330 subscriptions: most users have 2-3 devices; languages and zones rotate; 30 are anonymous.
-- Token prefixes (docs/emulator.md): 0410 -> 410 Unregistered, 0400 -> 400 BadDeviceToken,
-- 0503 -> 503 on the first attempt then 200, 0403 -> 400 DeviceTokenNotForTopic (fails, subscription kept).
-- Android (every 6th): fcm-unregistered / fcm-sender-mismatch / fcm-invalid are invalidated, fcm-quota
-- (QUOTA_EXCEEDED, retry-after 1 s) and fcm-unavailable fail once and are retried.
INSERT INTO subscriptions (app_id, user_id, platform, token, apns_environment, language, timezone, country)
SELECT '00000000-0000-4000-8000-00000000d3e0',
       CASE WHEN n <= 300 THEN (SELECT id FROM users WHERE external_id = format('user-%s', lpad((1 + (n - 1) % 120)::text, 3, '0'))) END,
       CASE WHEN n % 6 = 0 THEN 'android' ELSE 'ios' END,
       CASE WHEN n % 6 = 0 THEN
                CASE WHEN n % 25 = 0 THEN 'fcm-unregistered-' WHEN n % 31 = 0 THEN 'fcm-invalid-'
                     WHEN n % 17 = 0 THEN 'fcm-unavailable-' WHEN n % 23 = 0 THEN 'fcm-sender-mismatch-'
                     WHEN n % 7 = 0 THEN 'fcm-quota-' ELSE 'fcm-device-' END || md5('fcm' || n)
            WHEN n % 25 = 0 THEN '0410' WHEN n % 31 = 0 THEN '0400' WHEN n % 17 = 0 THEN '0503'
            WHEN n % 23 = 0 THEN '0403' ELSE 'a0a0' END
           || substr(md5('demo' || n) || md5('token' || n), 5) END,
       CASE WHEN n % 11 = 0 THEN 'sandbox' ELSE 'production' END,
       (ARRAY['en', 'tr', 'de', 'pt-BR', 'ja', 'fr', 'es', 'tr-TR', NULL])[1 + n % 9],
       (ARRAY['Europe/Istanbul', 'America/New_York', 'Europe/Berlin', 'America/Sao_Paulo', 'Asia/Tokyo',
              'Europe/Paris', 'Asia/Kathmandu', 'Australia/Lord_Howe', 'Pacific/Kiritimati'])[1 + n % 9],
       (ARRAY['TR', 'US', 'DE', 'BR', 'JP', 'FR', 'NP', 'AU', 'KI'])[1 + n % 9]
FROM generate_series(1, 330) AS n;

-- Web Push: a VAPID key, and 40 browser subscriptions whose keys the emulator derives from its seed
-- (docs/emulator.md); the channel's endpoint stays NULL: a web subscription's token is its push service URL.
INSERT INTO app_channels (app_id, provider, settings)
VALUES ('00000000-0000-4000-8000-00000000d3e0', 'webpush',
        jsonb_build_object('vapid_private_key', :'vapid_key', 'subject', 'mailto:demo@pushizo.example'));
INSERT INTO subscriptions (app_id, user_id, platform, token, web_p256dh, web_auth, language, timezone, country)
SELECT '00000000-0000-4000-8000-00000000d3e0',
       (SELECT id FROM users WHERE external_id = format('user-%s', lpad((1 + (n * 3) % 120)::text, 3, '0'))),
       'web', split_part(line, E'\t', 2), split_part(line, E'\t', 3), split_part(line, E'\t', 4),
       (ARRAY['en', 'tr', 'de', 'fr'])[1 + n::int % 4], 'Europe/Istanbul', 'TR'
FROM regexp_split_to_table(:'web_subscriptions', E'\n') WITH ORDINALITY AS t (line, n)
WHERE line <> '';

-- A campaign to every user, in five languages.
INSERT INTO notifications (app_id, campaign_id, message, target)
SELECT '00000000-0000-4000-8000-00000000d3e0', 'welcome-week',
       '{"headings": {"en": "Welcome to Pushizo", "tr": "Pushizo''ya hoş geldin", "de": "Willkommen bei Pushizo",
                      "pt": "Bem-vindo ao Pushizo", "ja": "Pushizoへようこそ"},
         "contents": {"en": "Your first week starts now.", "tr": "İlk haftan şimdi başlıyor.",
                      "de": "Deine erste Woche beginnt jetzt.", "pt": "Sua primeira semana começa agora.",
                      "ja": "最初の一週間が始まります。"},
         "ios_sound": "chime.caf", "thread_id": "onboarding", "ios_interruption_level": "active",
         "url": "pushizo-demo://welcome", "data": {"screen": "welcome", "step": 1}, "ttl": 86400}'::jsonb,
       jsonb_build_object('include_external_ids', jsonb_agg(external_id ORDER BY external_id))
FROM users;

-- A time-sensitive alert to 40 devices picked by subscription id.
INSERT INTO notifications (app_id, campaign_id, message, target)
SELECT '00000000-0000-4000-8000-00000000d3e0', 'price-drop',
       '{"headings": {"en": "Price drop", "tr": "Fiyat düştü"},
         "contents": {"en": "An item on your list is 30% off.", "tr": "Listendeki bir ürün %30 indirimde."},
         "ios_interruption_level": "time-sensitive", "priority": "high", "collapse_id": "price-drop"}'::jsonb,
       jsonb_build_object('include_subscription_ids', jsonb_agg(id))
-- Picked by a hash of what is the same every run: a web subscription's token is its endpoint URL, which holds
-- the emulator's port (the kernel's choice), so its keys stand in for it.
FROM (SELECT id FROM subscriptions ORDER BY md5(coalesce(web_auth, token)) LIMIT 40) AS s;

-- A silent background refresh for a handful of users.
INSERT INTO notifications (app_id, campaign_id, message, target)
VALUES ('00000000-0000-4000-8000-00000000d3e0', 'sync', '{"content_available": true, "data": {"sync": "inbox"}}',
        '{"include_external_ids": ["user-001", "user-002", "user-003"], "platforms": ["ios"]}');

-- Bad input the worker must survive: a malformed message and a malformed target.
INSERT INTO notifications (app_id, campaign_id, message, target)
VALUES ('00000000-0000-4000-8000-00000000d3e0', 'bad-message',
        '{"contents": {"en": "hello"}, "ios_interruption_level": "loud"}',
        '{"include_external_ids": ["user-010"]}'),
       ('00000000-0000-4000-8000-00000000d3e0', 'bad-target',
        '{"contents": {"en": "hello"}}', '{"include_subscription_ids": ["not-a-uuid"]}');
COMMIT;
