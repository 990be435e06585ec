#ifndef NH_CSYSTEMDBUS_SHIM_H
#define NH_CSYSTEMDBUS_SHIM_H
#include <systemd/sd-bus.h>

/* An empty error, as SD_BUS_ERROR_NULL makes it; macros do not cross into Swift. */
static inline sd_bus_error nh_sd_bus_error_null(void) {
    sd_bus_error error = SD_BUS_ERROR_NULL;
    return error;
}
#endif
