#ifndef PUSHIZO_CURL_SHIMS_H
#define PUSHIZO_CURL_SHIMS_H
// Functions standing in for libcurl's variadic curl_easy_setopt, curl_easy_getinfo and curl_multi_setopt, which
// Swift cannot call: one typed function per kind of argument.
#include <curl/curl.h>

CURLcode pz_curl_easy_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode pz_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value);
CURLcode pz_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value);
CURLcode pz_curl_easy_setopt_offset(CURL *handle, CURLoption option, curl_off_t value);
/// CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION.
CURLcode pz_curl_easy_setopt_write_callback(CURL *handle, CURLoption option, curl_write_callback callback);
/// CURLOPT_OPENSOCKETFUNCTION.
CURLcode pz_curl_easy_setopt_opensocket_callback(CURL *handle, curl_opensocket_callback callback);
CURLcode pz_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value);
/// CURLINFO_PRIVATE and the other `char *` answers.
CURLcode pz_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, char **value);
CURLMcode pz_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value);

/// The IP address curl is about to connect to, copied into `out` (network order): returns 4 (IPv4), 16 (IPv6)
/// or 0 (another family). `address->addr` is declared as a `struct sockaddr` but curl holds a whole
/// `sockaddr_storage` there, so an IPv6 address is read past the declared size in C, where that is defined.
int pz_curl_sockaddr_ip(const struct curl_sockaddr *address, unsigned char out[16]);
/// socket(2) with the family, type and protocol curl asked for, close-on-exec; -1 on failure.
curl_socket_t pz_curl_open_socket(const struct curl_sockaddr *address);

#endif
