#ifndef PUSHIZO_OPENSSL_SHIMS_H
#define PUSHIZO_OPENSSL_SHIMS_H
// Functions standing in for OpenSSL's function-like macros, which Swift does not import (one shim target per C
// library, as swift-nio-ssl's CNIOOpenSSL stood beside its system OpenSSL target).
#include <openssl/evp.h>
#include <openssl/ssl.h>

/// SSL_CTX_set_min_proto_version (a macro over SSL_CTX_ctrl). Returns 1 on success.
int pz_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version);
/// SSL_set_tlsext_host_name (a macro over SSL_ctrl): sets the SNI host name. Returns 1 on success.
int pz_SSL_set_tlsext_host_name(SSL *ssl, const char *name);
/// SSL_CTX_set_mode (macro): e.g. SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE.
long pz_SSL_CTX_set_mode(SSL_CTX *ctx, long mode);
/// SSL_CTX_set_options is a function in OpenSSL 3, kept here for symmetry with older releases.
unsigned long pz_SSL_CTX_set_options(SSL_CTX *ctx, unsigned long options);
/// SSL_CTX_add1_chain_cert (macro): appends an intermediate to the context's own chain (takes a reference).
/// Returns 1 on success.
long pz_SSL_CTX_add1_chain_cert(SSL_CTX *ctx, X509 *x509);

/// EVP_PKEY_PUBLIC_KEY (a macro over OSSL_KEYMGMT_SELECT_* bits): the selection for EVP_PKEY_fromdata
/// when importing a public key (e.g. a 65-byte uncompressed P-256 point).
int pz_EVP_PKEY_PUBLIC_KEY_selection(void);
/// EVP_PKEY_KEYPAIR (a macro over OSSL_KEYMGMT_SELECT_* bits): the selection for EVP_PKEY_fromdata when
/// importing a private key together with its public point.
int pz_EVP_PKEY_KEYPAIR_selection(void);
/// OPENSSL_free (a macro over CRYPTO_free with file/line): frees memory OpenSSL allocated for the caller,
/// e.g. the buffer from EVP_PKEY_get1_encoded_public_key.
void pz_OPENSSL_free(void *ptr);

#endif
