/**
 * Console texts: every string the UI shows lives in `zh-CN.json` / `en.json` (same keys; a test
 * checks it). Chinese is the default; the choice is kept in localStorage. The Ant Design and dayjs
 * locales follow the same choice (see `App.tsx`).
 */
import i18n from 'i18next';
import { initReactI18next } from 'react-i18next';
import dayjs from 'dayjs';
import 'dayjs/locale/zh-cn';
import en from './en.json';
import zhCN from './zh-CN.json';

export const LANGUAGES = ['zh-CN', 'en'] as const;
export type Language = (typeof LANGUAGES)[number];
export const DEFAULT_LANGUAGE: Language = 'zh-CN';
const STORAGE_KEY = 'rlark.lang';

function storedLanguage(): Language {
  try {
    const value = window.localStorage.getItem(STORAGE_KEY);
    return (LANGUAGES as readonly string[]).includes(value ?? '') ? (value as Language) : DEFAULT_LANGUAGE;
  } catch {
    return DEFAULT_LANGUAGE;
  }
}

export function applyDayjsLocale(lang: Language): void {
  dayjs.locale(lang === 'zh-CN' ? 'zh-cn' : 'en');
}

void i18n.use(initReactI18next).init({
  resources: { 'zh-CN': { translation: zhCN }, en: { translation: en } },
  lng: storedLanguage(),
  fallbackLng: DEFAULT_LANGUAGE,
  interpolation: { escapeValue: false },
  returnNull: false,
});
applyDayjsLocale(i18n.language as Language);

export async function setLanguage(lang: Language): Promise<void> {
  try {
    window.localStorage.setItem(STORAGE_KEY, lang);
  } catch {
    // storage may be disabled; the choice then lasts for this page only
  }
  applyDayjsLocale(lang);
  document.documentElement.lang = lang;
  await i18n.changeLanguage(lang);
}

export default i18n;
