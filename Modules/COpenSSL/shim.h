#ifndef NH_COPENSSL_SHIM_H
#define NH_COPENSSL_SHIM_H
#include <openssl/hmac.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#endif
