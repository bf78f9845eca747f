// Avahi's client library (talks to avahi-daemon over D-Bus), for the system discovery engine,
// loaded at run time: nothing links libavahi-client or libavahi-common, so a program using this
// package starts on a machine without Avahi, where the embedded engine does the discovery.
//
// Avahi's own headers (build dependency: Debian libavahi-client-dev) give the types, constants
// and struct layouts; the functions are called through the cavahi_ wrappers below, which forward
// to the ones dlsym() found. Call cavahi_load() first: before it returned 0, no wrapper may run.
#ifndef CAVAHI_CLIENT_H
#define CAVAHI_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#include <avahi-client/client.h>
#include <avahi-client/lookup.h>
#include <avahi-client/publish.h>
#include <avahi-common/address.h>
#include <avahi-common/error.h>
#include <avahi-common/strlst.h>
#include <avahi-common/thread-watch.h>
#include <avahi-common/timeval.h>
#include <avahi-common/watch.h>

/// The sonames loaded: the ABI the headers describe (Avahi has kept it since 0.6).
#define CAVAHI_CLIENT_SONAME "libavahi-client.so.3"
#define CAVAHI_COMMON_SONAME "libavahi-common.so.3"

/// Loads both libraries and resolves every function below, once per process (later calls return
/// the first outcome). Thread-safe. 0 when the wrappers are ready; -1 otherwise, and
/// cavahi_load_error() says why.
int cavahi_load(void);

/// Why cavahi_load() failed (the dynamic loader's words), or NULL after a success.
const char *cavahi_load_error(void);

// The functions the Swift code calls: F(library, return type, Avahi's name, parameters,
// arguments) for those returning a value, V(...) for those returning void. Each becomes a
// wrapper named c<Avahi's name> (cavahi_client_new for avahi_client_new).
#define CAVAHI_FUNCTIONS(F, V) \
    F(common, AvahiThreadedPoll *, avahi_threaded_poll_new, (void), ()) \
    V(common, avahi_threaded_poll_free, (AvahiThreadedPoll *p), (p)) \
    F(common, const AvahiPoll *, avahi_threaded_poll_get, (AvahiThreadedPoll *p), (p)) \
    F(common, int, avahi_threaded_poll_start, (AvahiThreadedPoll *p), (p)) \
    F(common, int, avahi_threaded_poll_stop, (AvahiThreadedPoll *p), (p)) \
    V(common, avahi_threaded_poll_lock, (AvahiThreadedPoll *p), (p)) \
    V(common, avahi_threaded_poll_unlock, (AvahiThreadedPoll *p), (p)) \
    F(common, const char *, avahi_strerror, (int error), (error)) \
    F(common, struct timeval *, avahi_elapse_time, (struct timeval *tv, unsigned ms, unsigned j), (tv, ms, j)) \
    V(common, avahi_string_list_free, (AvahiStringList *l), (l)) \
    F(common, AvahiStringList *, avahi_string_list_add_arbitrary, (AvahiStringList *l, const uint8_t *text, size_t size), (l, text, size)) \
    F(common, AvahiStringList *, avahi_string_list_get_next, (AvahiStringList *l), (l)) \
    F(common, uint8_t *, avahi_string_list_get_text, (AvahiStringList *l), (l)) \
    F(common, size_t, avahi_string_list_get_size, (AvahiStringList *l), (l)) \
    F(client, AvahiClient *, avahi_client_new, \
        (const AvahiPoll *poll_api, AvahiClientFlags flags, AvahiClientCallback callback, void *userdata, int *error), \
        (poll_api, flags, callback, userdata, error)) \
    V(client, avahi_client_free, (AvahiClient *client), (client)) \
    F(client, AvahiClientState, avahi_client_get_state, (AvahiClient *client), (client)) \
    F(client, int, avahi_client_errno, (AvahiClient *client), (client)) \
    F(client, AvahiEntryGroup *, avahi_entry_group_new, \
        (AvahiClient *client, AvahiEntryGroupCallback callback, void *userdata), (client, callback, userdata)) \
    F(client, int, avahi_entry_group_add_service_strlst, \
        (AvahiEntryGroup *group, AvahiIfIndex interface, AvahiProtocol protocol, AvahiPublishFlags flags, const char *name, \
            const char *type, const char *domain, const char *host, uint16_t port, AvahiStringList *txt), \
        (group, interface, protocol, flags, name, type, domain, host, port, txt)) \
    F(client, int, avahi_entry_group_add_address, \
        (AvahiEntryGroup *group, AvahiIfIndex interface, AvahiProtocol protocol, AvahiPublishFlags flags, const char *name, \
            const AvahiAddress *a), \
        (group, interface, protocol, flags, name, a)) \
    F(client, int, avahi_entry_group_commit, (AvahiEntryGroup *group), (group)) \
    F(client, int, avahi_entry_group_reset, (AvahiEntryGroup *group), (group)) \
    F(client, int, avahi_entry_group_free, (AvahiEntryGroup *group), (group)) \
    F(client, AvahiClient *, avahi_entry_group_get_client, (AvahiEntryGroup *group), (group)) \
    F(client, AvahiServiceBrowser *, avahi_service_browser_new, \
        (AvahiClient *client, AvahiIfIndex interface, AvahiProtocol protocol, const char *type, const char *domain, \
            AvahiLookupFlags flags, AvahiServiceBrowserCallback callback, void *userdata), \
        (client, interface, protocol, type, domain, flags, callback, userdata)) \
    F(client, int, avahi_service_browser_free, (AvahiServiceBrowser *browser), (browser)) \
    F(client, AvahiClient *, avahi_service_browser_get_client, (AvahiServiceBrowser *browser), (browser)) \
    F(client, AvahiServiceResolver *, avahi_service_resolver_new, \
        (AvahiClient *client, AvahiIfIndex interface, AvahiProtocol protocol, const char *name, const char *type, \
            const char *domain, AvahiProtocol aprotocol, AvahiLookupFlags flags, AvahiServiceResolverCallback callback, \
            void *userdata), \
        (client, interface, protocol, name, type, domain, aprotocol, flags, callback, userdata)) \
    F(client, int, avahi_service_resolver_free, (AvahiServiceResolver *resolver), (resolver))

#define CAVAHI_DECLARE(library, type, name, parameters, arguments) type c##name parameters;
#define CAVAHI_DECLARE_VOID(library, name, parameters, arguments) void c##name parameters;
CAVAHI_FUNCTIONS(CAVAHI_DECLARE, CAVAHI_DECLARE_VOID)
#undef CAVAHI_DECLARE
#undef CAVAHI_DECLARE_VOID

#endif
