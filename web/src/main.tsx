import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { BrowserRouter } from 'react-router-dom';
import './i18n';
import './styles.css';
import App from './App';
import Providers, { makeQueryClient } from './providers';
import { SessionProvider } from './auth';

const client = makeQueryClient();

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <Providers client={client}>
      <SessionProvider>
        <BrowserRouter>
          <App />
        </BrowserRouter>
      </SessionProvider>
    </Providers>
  </StrictMode>,
);
