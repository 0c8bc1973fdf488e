#include "CPushizoOpenSSLShims.h"

int pz_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}

int pz_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

long pz_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}

unsigned long pz_SSL_CTX_set_options(SSL_CTX *ctx, unsigned long options) {
    return (unsigned long)SSL_CTX_set_options(ctx, options);
}

long pz_SSL_CTX_add1_chain_cert(SSL_CTX *ctx, X509 *x509) {
    return SSL_CTX_add1_chain_cert(ctx, x509);
}

int pz_EVP_PKEY_PUBLIC_KEY_selection(void) {
    return EVP_PKEY_PUBLIC_KEY;
}

int pz_EVP_PKEY_KEYPAIR_selection(void) {
    return EVP_PKEY_KEYPAIR;
}

void pz_OPENSSL_free(void *ptr) {
    OPENSSL_free(ptr);
}
