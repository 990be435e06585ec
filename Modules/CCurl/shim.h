#ifndef NH_CCURL_SHIM_H
#define NH_CCURL_SHIM_H
#include <curl/curl.h>

/* curl_easy_setopt, curl_multi_setopt and curl_easy_getinfo are variadic, which Swift cannot
   call: one typed wrapper per argument kind. */
static inline CURLcode nh_curl_easy_setopt_long(CURL *easy, CURLoption option, long value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode nh_curl_easy_setopt_pointer(CURL *easy, CURLoption option, void *value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode nh_curl_easy_setopt_string(CURL *easy, CURLoption option, const char *value) {
    return curl_easy_setopt(easy, option, value);
}
typedef size_t (*nh_curl_data_callback)(char *data, size_t size, size_t count, void *context);
static inline CURLcode nh_curl_easy_setopt_callback(CURL *easy, CURLoption option, nh_curl_data_callback value) {
    return curl_easy_setopt(easy, option, value);
}
/* The sockets a transfer's connections are made on: told when one is made, and closing it. */
static inline CURLcode nh_curl_easy_setopt_sockopt(CURL *easy, curl_sockopt_callback value) {
    return curl_easy_setopt(easy, CURLOPT_SOCKOPTFUNCTION, value);
}
static inline CURLcode nh_curl_easy_setopt_closesocket(CURL *easy, curl_closesocket_callback value) {
    return curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, value);
}
static inline CURLMcode nh_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}
static inline CURLcode nh_curl_easy_getinfo_long(CURL *easy, CURLINFO info, long *value) {
    return curl_easy_getinfo(easy, info, value);
}
static inline CURLcode nh_curl_easy_getinfo_socket(CURL *easy, CURLINFO info, curl_socket_t *value) {
    return curl_easy_getinfo(easy, info, value);
}
static inline CURLcode nh_curl_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value) {
    return curl_easy_getinfo(easy, info, value);
}
#endif
