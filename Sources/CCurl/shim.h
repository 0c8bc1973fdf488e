#ifndef PUSHIZO_CCURL_SHIM_H
#define PUSHIZO_CCURL_SHIM_H
#include <curl/curl.h>
#endif
